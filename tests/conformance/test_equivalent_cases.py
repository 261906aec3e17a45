"""`equivalent_cases` (conformance/adapters/spelling.py): every form it offers for a case is the same attention.

A spelling claims a case when it can say one of its forms, so a form with another mask would have the adapter
compute something else than the case: each form's visibility (SEMANTICS.md §4, §5, §7) must equal the case's, over
square, non-square and varlen shapes, both alignments and windows with and without each bound.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters.spelling import equivalent_cases
from attention_conformance.cases.case import Case

SHAPES = [(1, 1, None, None), (5, 5, None, None), (3, 7, None, None), (7, 3, None, None), (1, 9, None, None),
          (6, 6, (6, 2), (6, 4)), (4, 8, (1, 4), (8, 8))]
WINDOWS = [None, (2, None), (None, 1), (2, 0), (0, 3), (None, 0), (3, 5)]


def _cases():
    for (lq, lk, sq, sk), causal, alignment, window in itertools.product(
            SHAPES, (False, True), ("bottom_right", "top_left"), WINDOWS):
        if not causal and window is None and alignment == "top_left":
            continue
        yield Case("t", 2 if sq else 1, 1, 1, lq, lk, 8, 8, causal=causal, alignment=alignment, window=window,
                   seqlens_q=sq, seqlens_k=sk)


def _vis(case: Case) -> np.ndarray:
    v = tc.visibility(case, None)
    return np.ones((case.B, 1, case.Lq, case.Lk), dtype=bool) if v is None else v


@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: f"{c.Lq}x{c.Lk}-{c.causal}-{c.alignment}-{c.window}"
                         f"-{c.seqlens_q}")
def test_every_form_is_the_same_attention(case):
    want = _vis(case)
    forms = equivalent_cases(case)
    assert forms[0] is case
    for form in forms[1:]:
        assert np.array_equal(_vis(form), want), (form.causal, form.alignment, form.window)


def test_causal_drops_a_right_bound_it_already_keeps():
    case = Case("t", 1, 1, 1, 5, 9, 8, 8, causal=True, window=(None, 2))
    assert any(f.window is None and f.causal for f in equivalent_cases(case))
    case = case.replace(window=(3, 4))
    assert any(f.window == (3, None) and f.causal for f in equivalent_cases(case))
