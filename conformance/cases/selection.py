"""The ``-k`` selection language: names joined by ``and``, ``or``, ``not`` and parentheses, parsed, never evaluated.

One grammar serves every selector of the project: ``python -m attention_conformance run -k`` and ``cases -k`` (case
ids, through `conformance.cases.catalog.select`), ``pytest conformance/ --cases EXPR`` (the same case ids), and
``python -m attention_conformance mutants -k`` (mutant names)::

    expr    := term ("or" term)*
    term    := factor ("and" factor)*
    factor  := "not"* atom
    atom    := "(" expr ")" | NAME

A NAME is any run of characters other than whitespace and parentheses that is not one of the three
keywords (case ids hold ``-``, ``_``, ``.`` and digits, e.g. ``tile_edges-b1h2x2-q1k129``). A bare NAME
matches a text when it is a case-insensitive *substring* of it (``causal`` matches every causal case id,
``q1k129`` one shape; ``f16`` matches ``bf16`` too, so write ``-f16-`` for fp16 alone): the semantics
``-k`` had before this grammar. An empty or blank expression matches everything. ``and`` binds tighter
than ``or``; ``not`` binds tightest. Keywords are lower case; ``AND`` is a NAME.

Nothing is ever passed to `eval`: `parse` builds a small tree of tuples and `Selector.matches` walks it.
A malformed expression raises `SelectorError` (a `ValueError`) whose message is one line naming the
expression and the column, which the command line prints as a usage error (exit code 2).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Selector", "SelectorError", "parse", "select", "MAX_DEPTH"]

T = TypeVar("T")

#: parentheses deeper than this are refused (the tree is walked recursively)
MAX_DEPTH = 64
_KEYWORDS = ("and", "or", "not")
_TOKEN = re.compile(r"\s*(?:(\()|(\))|([^\s()]+))")

# tree nodes: ("name", text) | ("not", node) | ("and", [nodes]) | ("or", [nodes]) | ("all",)
Node = tuple


class SelectorError(ValueError):
    """A malformed ``-k`` expression; the message is one line."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # "(", ")", "and", "or", "not", "name", "end"
    text: str
    col: int  # 1-based column in the expression


def _tokens(expr: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:  # only trailing whitespace is left
            break
        if m.group(1):
            out.append(_Tok("(", "(", m.start(1) + 1))
        elif m.group(2):
            out.append(_Tok(")", ")", m.start(2) + 1))
        elif m.group(3):
            word = m.group(3)
            out.append(_Tok(word if word in _KEYWORDS else "name", word, m.start(3) + 1))
        pos = m.end()
    out.append(_Tok("end", "", len(expr) + 1))
    return out


class _Parser:
    def __init__(self, expr: str):
        self.expr = expr
        self.toks = _tokens(expr)
        self.i = 0
        self.depth = 0

    def error(self, what: str, tok: _Tok) -> SelectorError:
        found = "the end of the expression" if tok.kind == "end" else repr(tok.text)
        return SelectorError(f"bad -k expression {self.expr!r}: {what}, found {found} at column {tok.col}")

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def parse(self) -> Node:
        if self.tok.kind == "end":
            return ("all",)
        node = self.expr_()
        if self.tok.kind != "end":
            what = "unbalanced ')'" if self.tok.kind == ")" else "expected 'and', 'or' or the end"
            raise self.error(what, self.tok)
        return node

    def expr_(self) -> Node:
        parts = [self.term()]
        while self.tok.kind == "or":
            self.take()
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else ("or", parts)

    def term(self) -> Node:
        parts = [self.factor()]
        while self.tok.kind == "and":
            self.take()
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else ("and", parts)

    def factor(self) -> Node:
        negations = 0
        while self.tok.kind == "not":
            self.take()
            negations += 1
        node = self.atom()
        return ("not", node) if negations % 2 else node

    def atom(self) -> Node:
        tok = self.tok
        if tok.kind == "name":
            self.take()
            if self.tok.kind == "(":
                raise self.error(f"a name cannot be called or followed by '(' (after {tok.text!r})", self.tok)
            return ("name", tok.text.lower())
        if tok.kind == "(":
            self.take()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.error(f"parentheses nested deeper than {MAX_DEPTH}", tok)
            node = self.expr_()
            if self.tok.kind != ")":
                raise self.error(f"expected ')' to close the '(' at column {tok.col}", self.tok)
            self.take()
            self.depth -= 1
            return node
        raise self.error("expected a name, 'not' or '('", tok)


class Selector:
    """A parsed ``-k`` expression; `matches(text)` says whether ``text`` is selected."""

    def __init__(self, expr: str | None):
        self.expr = expr or ""
        self.tree: Node = _Parser(self.expr).parse()

    def matches(self, text: str) -> bool:
        return _eval(self.tree, text.lower())

    def __repr__(self) -> str:
        return f"Selector({self.expr!r})"


def _eval(node: Node, text: str) -> bool:
    kind = node[0]
    if kind == "name":
        return node[1] in text
    if kind == "not":
        return not _eval(node[1], text)
    if kind == "and":
        return all(_eval(n, text) for n in node[1])
    if kind == "or":
        return any(_eval(n, text) for n in node[1])
    return True  # "all"


def parse(expr: str | None) -> Selector:
    """Parse ``expr``; `SelectorError` (one line) if it is malformed."""
    return Selector(expr)


def select(items: Iterable[T], expr: str | None, key: Callable[[T], str]) -> list[T]:
    """The items whose ``key(item)`` the expression selects, in their order (all of them for an empty expr)."""
    sel = parse(expr)
    return [x for x in items if sel.matches(key(x))]
