"""The case model: what one conformance case is, which cases a profile holds, and the data of one case.

`case` (the `Case` record, its id and fields), `features` (the features and the constraints between them),
`covering` (the pairwise covering design the ``pairs`` family is built with), `catalog` (the profiles: one
generator per family), `selection` (the ``-k`` language), `inputs` (a case's FP64 inputs from its seed) and
`calldata` (what crosses the adapter boundary: the inputs handed over, the outputs and calls that come back).
"""
