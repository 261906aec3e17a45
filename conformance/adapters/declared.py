"""What a plain SDPA-signature function declares it supports: ``@conformance.claims(...)`` or ``--claims SPEC``.

A function under test (``--impl module:fn``, conformance/adapters/third_party.py) is probed for the
features nobody declared; what is declared is not probed but claimed, so a declared feature that then
raises or is wrong is a FAIL, and every case outside the declared set is NOT_SUPPORTED with the reason::

    import attention_conformance as conformance

    @conformance.claims(dtypes=("float16", "bfloat16"), head_dims=(64, 128), causal="only")
    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        ...

For a function one cannot edit, the same declaration on the command line::

    python -m attention_conformance run --impl theirpkg.attn:fn --claims "dtypes=float16,bfloat16; head_dims=64,128;
    causal=only"
    python -m attention_conformance run --impl a:f b:g --claims "b:g=causal=only; backward=false"   # for one function

Keys (each optional; an undeclared feature is probed):

- ``dtypes``: of float64, float32, float16, bfloat16;
- ``head_dims``: the head dims d (and dv) it accepts;
- ``causal``: ``"only"`` (every call is ``is_causal=True``; non-causal cases and cases that need an
  ``attn_mask`` are NOT_SUPPORTED), ``True`` (both), ``False`` (never causal);
- ``alignments``: causal alignments it computes right, of ``top_left``, ``bottom_right`` (SEMANTICS.md §4);
  ``is_causal`` is top-left, so bottom-right at Lq != Lk goes through a boolean mask;
- ``seqlen_multiple``: Lq and Lk must be multiples of this (kernels without tail handling);
- ``mask`` (boolean ``attn_mask``, also used for windows, varlen padding and bottom-right causal), ``bias``
  (float ``attn_mask``), ``gqa`` (``enable_gqa=True``), ``dv_ne_d``, ``scale``, ``backward`` (autograd):
  booleans.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from attention_conformance.cases.case import ALIGNMENTS

__all__ = ["Claims", "ClaimsError", "CLAIMS_ATTR", "CLAIMS_ENV", "SDPA_DTYPES", "claims", "claims_of",
           "claims_reason", "parse_spec", "cli_claims_for", "cli_claims_env", "cli_claims", "unclaimed_targets"]

SDPA_DTYPES = ("float32", "float16", "bfloat16", "float64")
#: the attribute `claims` sets on a function (a `Claims`, or a dict of the same keys)
CLAIMS_ATTR = "conformance_claims"
#: ``--claims`` reaches worker processes through this variable: JSON {impl spec or "*": spec string}
CLAIMS_ENV = "CONFORMANCE_CLAIMS"
_BOOLS = ("mask", "bias", "gqa", "dv_ne_d", "scale", "backward")
F = TypeVar("F", bound=Callable[..., Any])


class ClaimsError(ValueError):
    """A malformed declaration; the message names the key and the value."""


@dataclass(frozen=True)
class Claims:
    """A function's declared support (None = not declared: probed)."""

    dtypes: frozenset[str] | None = None
    head_dims: frozenset[int] | None = None
    causal: bool | str | None = None  # "only" | True | False
    alignments: frozenset[str] | None = None
    seqlen_multiple: int | None = None
    mask: bool | None = None
    bias: bool | None = None
    gqa: bool | None = None
    dv_ne_d: bool | None = None
    scale: bool | None = None
    backward: bool | None = None

    def __post_init__(self) -> None:
        if self.dtypes is not None:
            bad = sorted(set(self.dtypes) - set(SDPA_DTYPES))
            if bad or not self.dtypes:
                raise ClaimsError(f"claims dtypes={sorted(self.dtypes)}: expected a non-empty subset of {SDPA_DTYPES}")
        if self.head_dims is not None and (not self.head_dims or any(d < 1 for d in self.head_dims)):
            raise ClaimsError(f"claims head_dims={sorted(self.head_dims)}: expected positive integers")
        if self.causal not in (None, True, False, "only"):
            raise ClaimsError(f"claims causal={self.causal!r}: expected 'only', True or False")
        if self.alignments is not None and not set(self.alignments) <= set(ALIGNMENTS):
            raise ClaimsError(f"claims alignments={sorted(self.alignments)}: expected a subset of {ALIGNMENTS}")
        if self.seqlen_multiple is not None and self.seqlen_multiple < 1:
            raise ClaimsError(f"claims seqlen_multiple={self.seqlen_multiple}: expected a positive integer")
        for name in _BOOLS:
            if getattr(self, name) not in (None, True, False):
                raise ClaimsError(f"claims {name}={getattr(self, name)!r}: expected True or False")

    @classmethod
    def make(cls, **kw: Any) -> Claims:
        """Claims from keyword values as a user writes them (lists, tuples, strings)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kw) - known)
        if unknown:
            raise ClaimsError(f"claims: unknown key(s) {unknown}; known: {sorted(known)}")
        out: dict[str, Any] = {}
        for key, value in kw.items():
            if value is None:
                continue
            if key == "dtypes":
                out[key] = frozenset(str(x).replace("torch.", "") for x in _seq(value))
            elif key == "head_dims":
                out[key] = frozenset(_int(x, key) for x in _seq(value))
            elif key == "alignments":
                out[key] = frozenset(str(x) for x in _seq(value))
            elif key == "seqlen_multiple":
                out[key] = _int(value, key)
            elif key == "causal":
                out[key] = "only" if value == "only" else _bool(value, key)
            else:
                out[key] = _bool(value, key)
        return cls(**out)

    def merged(self, other: Claims) -> Claims:
        """These claims with every key ``other`` declares replaced by ``other``'s."""
        return Claims(**{f.name: getattr(other, f.name) if getattr(other, f.name) is not None
                         else getattr(self, f.name) for f in fields(self)})

    def declared(self) -> dict[str, Any]:
        """The declared keys, JSON-friendly (sets sorted)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = sorted(v) if isinstance(v, frozenset) else v
        return out

    def key(self) -> str:
        return json.dumps(self.declared(), sort_keys=True)


def _seq(value: Any) -> Iterable[Any]:
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    if isinstance(value, Iterable):
        return list(value)
    return [value]


def _int(value: Any, key: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ClaimsError(f"claims {key}: {value!r} is not an integer") from None


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    raise ClaimsError(f"claims {key}={value!r}: expected true or false" + (" or only" if key == "causal" else ""))


def claims(**kw: Any) -> Callable[[F], F]:
    """Decorator: declare what a plain SDPA-signature function supports (keys: the module docstring).

    The function is returned unchanged, with the `Claims` in its ``conformance_claims`` attribute.
    """
    declared = Claims.make(**kw)

    def mark(fn: F) -> F:
        setattr(fn, CLAIMS_ATTR, declared)
        return fn

    return mark


def claims_of(fn: Any) -> Claims | None:
    """The claims a function carries (``conformance_claims`` attribute: a `Claims` or a dict), or None."""
    raw = getattr(fn, CLAIMS_ATTR, None)
    if raw is None:
        return None
    if isinstance(raw, Claims):
        return raw
    if isinstance(raw, dict):
        return Claims.make(**raw)
    raise ClaimsError(f"{CLAIMS_ATTR} of {fn!r} is a {type(raw).__name__}; expected conformance.Claims or a dict")


def parse_spec(spec: str) -> tuple[str, Claims]:
    """``"[MODULE:ATTR=]key=value; key=value ..."`` -> (impl spec or "*", `Claims`).

    Values are comma lists (``dtypes=float16,bfloat16``), integers, ``true``/``false``, ``causal=only``.
    """
    text = spec.strip()
    target = "*"
    head, sep, rest = text.partition("=")
    if sep and ":" in head:
        target, text = head.strip(), rest
    kw: dict[str, Any] = {}
    for part in text.replace(";", " ").split():
        key, sep, value = part.partition("=")
        if not sep or not key or not value:
            raise ClaimsError(f"--claims {spec!r}: {part!r} is not key=value (e.g. dtypes=float16,bfloat16)")
        if key in kw:
            raise ClaimsError(f"--claims {spec!r}: {key} given twice")
        kw[key] = value
    if not kw:
        raise ClaimsError(f"--claims {spec!r}: no key=value given")
    try:
        return target, Claims.make(**kw)
    except ClaimsError as exc:
        raise ClaimsError(f"--claims {spec!r}: {exc}") from None


def cli_claims_env(specs: Iterable[str]) -> str:
    """The `CLAIMS_ENV` value for ``--claims`` arguments (raises `ClaimsError` on a malformed one)."""
    out: dict[str, str] = {}
    for s in specs:
        target, _ = parse_spec(s)
        body = s.split("=", 1)[1] if target != "*" else s
        out[target] = f"{out[target]}; {body}" if target in out else body
        parse_spec(out[target])  # the same key in two --claims for one target is an error
    return json.dumps(out, sort_keys=True)


def cli_claims_for(spec: str) -> Claims | None:
    """The ``--claims`` for ``spec`` from `CLAIMS_ENV`: the ones for every function, then its own on top."""
    raw = os.environ.get(CLAIMS_ENV)
    if not raw:
        return None
    table = json.loads(raw)
    found = [parse_spec(table[t])[1] for t in ("*", spec) if t in table]
    if not found:
        return None
    return found[0].merged(found[1]) if len(found) == 2 else found[0]


def claims_reason(c: Claims, case: Any, *, needs_mask: bool) -> str | None:
    """Why ``case`` is outside the declaration ``c`` (a sentence), or None. ``needs_mask``: the SDPA signature
    expresses the case only with an ``attn_mask`` (bottom-right at Lq != Lk, windows, varlen, masks, biases)."""
    if c.dtypes is not None and case.dtype not in c.dtypes:
        return f"dtype {case.dtype} not in the declared dtypes {sorted(c.dtypes)}"
    if c.head_dims is not None and (case.d not in c.head_dims or case.dv not in c.head_dims):
        return f"head dim d={case.d}, dv={case.dv} not in the declared head dims {sorted(c.head_dims)}"
    if c.causal == "only":
        if not case.causal:
            return "declared causal='only': the function computes causal attention only, this case is not causal"
        if needs_mask:
            return ("declared causal='only': the function is only called with is_causal=True, and this case needs "
                    "an attn_mask (bottom-right causal at Lq != Lk, a window, varlen padding, a mask or a bias)")
    if c.causal is False and case.causal and not needs_mask:
        return "declared causal=False: is_causal=True is not implemented"
    if c.alignments is not None and case.causal and case.Lq != case.Lk and case.alignment not in c.alignments:
        return f"causal alignment {case.alignment} not in the declared alignments {sorted(c.alignments)}"
    if c.seqlen_multiple is not None and (case.Lq % c.seqlen_multiple or case.Lk % c.seqlen_multiple):
        return f"Lq={case.Lq}, Lk={case.Lk}: the declared seqlen_multiple is {c.seqlen_multiple}"
    checks = (("mask", needs_mask and case.bias is None, "a boolean attn_mask"),
              ("bias", case.bias is not None, "a float attn_mask (additive bias)"),
              ("gqa", case.Hq != case.Hkv, f"GQA/MQA (Hq={case.Hq}, Hkv={case.Hkv})"),
              ("dv_ne_d", case.dv != case.d, f"dv={case.dv} != d={case.d}"),
              ("scale", case.scale is not None, "a custom scale"),
              ("backward", case.backward, "the backward (autograd)"))
    for key, used, what in checks:
        if used and getattr(c, key) is False:
            return f"declared {key}=False: this case needs {what}"
    return None


@contextlib.contextmanager
def cli_claims(specs: Sequence[str]) -> Iterator[None]:
    """Within the block, `CLAIMS_ENV` holds the ``--claims`` arguments (worker processes inherit it)."""
    if not specs:
        yield
        return
    value = cli_claims_env(specs)
    old = os.environ.get(CLAIMS_ENV)
    os.environ[CLAIMS_ENV] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(CLAIMS_ENV, None)
        else:
            os.environ[CLAIMS_ENV] = old


def unclaimed_targets(specs: Sequence[str], loaded: Sequence[Any]) -> list[str]:
    """Problems with ``--claims`` given the run's loaded adapters: a ``MODULE:ATTR=`` target that is not one
    of them, or claims when no plain SDPA-signature function is among them (one sentence each)."""
    plain = {la.spec for la in loaded if isinstance(getattr(la.adapter, "claims", None), Claims)}
    problems = []
    for s in specs:
        target, _ = parse_spec(s)
        if target != "*" and target not in plain:
            problems.append(f"{s!r}: {target} is not a plain SDPA-signature function named with --impl "
                            f"(plain functions here: {sorted(plain) or 'none'})")
        elif target == "*" and not plain:
            problems.append(f"{s!r}: no --impl of this run is a plain SDPA-signature function "
                            "(adapters declare their Capabilities themselves)")
    return problems
