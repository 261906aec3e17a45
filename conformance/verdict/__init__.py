"""The verdict: what a case's results are judged against, and how.

`oracle_values` (the FP64 oracle's values for a case), `precision` (the precision model of a correct kernel),
`bounds` (the a-priori error bounds, TOLERANCES.md, in one pass with `naive`, the naive same-precision
implementation), `checks` (the per-quantity checks), `lse_convention` (an adapter's LSE in the contract's
convention), `judge` (the pure function from calls to a verdict), `outcomes` (the outcome names and their
counts), `expectations` (known failures: KNOWN / UNEXPECTED_PASS), `growth` (memory growth over a run) and
`numfmt` (how numbers appear in verdict messages and reports).
"""
