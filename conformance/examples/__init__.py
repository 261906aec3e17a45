"""Example implementations for the harness's demos and tests (SEMANTICS.md is the contract they face).

- `good_sdpa.attention`: a plain-torch function with torch SDPA's signature, correct on finite inputs (like
  torch's math backend it lets NaN in padded, masked-out K/V rows reach real rows: the `nan_padding` cases fail).
- `broken_sdpa.attention`: the same tiled online-softmax algorithm with a realistic tail-tile bug
  (an off-by-one in the tile count drops the last key block when Lk % 64 == 1); the conformance run
  must FAIL it and print a repro that shows the failure:
  ``python -m attention_conformance run --impl attention_conformance.examples.broken_sdpa:attention --profile ci``.
"""

__all__ = ["broken_sdpa", "good_sdpa"]
