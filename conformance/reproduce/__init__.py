"""Reproducing one case outside the run: ``python -m attention_conformance repro CASE_ID [--standalone]``.

`snippet` (a Python snippet that imports this package and hands its calls to the same judge), `standalone` (a
file that imports nothing from this package, conformance/repros/ holds the shipped ones), written from
`inputs` (the case's inputs in plain NumPy), `calls` (each built-in adapter's call) and `source` (the functions
such a file carries, copied verbatim).
"""
