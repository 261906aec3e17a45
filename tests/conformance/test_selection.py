"""The ``-k`` grammar (conformance/cases/selection.py): precedence, parentheses, substring names, one-line errors."""

from __future__ import annotations

import pytest

from attention_conformance.cases import catalog
from attention_conformance.cases.selection import MAX_DEPTH, SelectorError, parse, select

IDS = ["tile_edges-b1h2x2-q1k129-d32-f16-causal_br-aaaaaa", "gqa-b1h4x1-q1k65-d32-bf16-bbbbbb",
       "fp8-b1h2x2-q64k96-d64-f8_e4m3fn-fp8-e4m3fn-per_tensor-cccccc", "window-b1h2x2-q70k70-d64-f16-win16_0-dddddd"]


def _sel(expr):
    return select(IDS, expr, key=lambda s: s)


@pytest.mark.parametrize("expr,want", [
    ("", IDS),
    ("   ", IDS),
    (None, IDS),
    ("causal", [IDS[0]]),
    ("CAUSAL", [IDS[0]]),  # names are case-insensitive substrings
    ("q1k", [IDS[0], IDS[1]]),
    ("not fp8", [IDS[0], IDS[1], IDS[3]]),
    ("not not fp8", [IDS[2]]),
    ("gqa or fp8 and e5m2", [IDS[1]]),  # and binds tighter than or
    ("(gqa or fp8) and not e5m2", [IDS[1], IDS[2]]),
    ("d64 and (win16 or per_tensor)", [IDS[2], IDS[3]]),
    ("tile_edges-b1h2x2-q1k129", [IDS[0]]),  # hyphens and digits are part of a name
    ("f16 and not (causal or win)", [IDS[1]]),  # a substring: f16 matches bf16 too
    ("AND", []),  # keywords are lower case; AND is a name
])
def test_selects(expr, want):
    assert _sel(expr) == want


@pytest.mark.parametrize("expr,where", [
    ("__import__('os')", "column 11"),
    ("(causal and", "end of the expression"),
    ("causal and", "end of the expression"),
    ("or gqa", "column 1"),
    ("gqa fp8", "column 5"),
    ("gqa)", "unbalanced ')'"),
    ("(gqa", "expected ')'"),
    ("()", "column 2"),
    ("not", "end of the expression"),
    ("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1), f"deeper than {MAX_DEPTH}"),
])
def test_malformed_is_one_line_error(expr, where):
    with pytest.raises(SelectorError) as exc:
        parse(expr)
    msg = str(exc.value)
    assert "\n" not in msg and where in msg and repr(expr)[:40] in msg, msg
    assert isinstance(exc.value, ValueError)


def test_never_evaluated():
    """A name is matched as text, whatever it spells: nothing reaches eval, builtins or attribute access."""
    assert _sel("__import__") == []
    assert select(["x__class__y"], "__class__", key=lambda s: s) == ["x__class__y"]
    assert select(["a"], "1/0 or a", key=lambda s: s) == ["a"]


def test_catalog_select_uses_the_grammar():
    cs = catalog.cases("ci")
    both = catalog.select(cs, "causal and not fp8")
    assert both and all("causal" in c.id.lower() and "fp8" not in c.id.lower() for c in both)
    assert len(catalog.select(cs, "gqa or (fp8 and e5m2)")) == len(
        [c for c in cs if "gqa" in c.id or ("fp8" in c.id and "e5m2" in c.id)])
    with pytest.raises(SelectorError):
        catalog.select(cs, "(causal and")
