"""Shared checks of the adapter tests: run an adapter on a case and compare with the FP64 oracle.

The bounds here are sanity bounds for tiny N(0, 1) problems (d = 16, L <= 70), a few units of the
dtype's roundoff times the O(1) output magnitude; the engine's real policy is conformance/TOLERANCES.md.
"""

from __future__ import annotations

import contextlib

import numpy as np

from attention_conformance import oracles
from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import make_inputs

__all__ = ["BOUND", "real_rows", "check_forward", "check_backward", "file_status", "in_process_runner", "reference",
           "installed", "small_cases", "spread_pairs", "standalone_on_cpu"]

BOUND = {"float64": 1e-12, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


def reference(case: Case, inputs):
    return oracles.attention(inputs.q, inputs.k, inputs.v, mask=inputs.mask, bias=inputs.bias, **case.oracle_kwargs)


def real_rows(case: Case) -> np.ndarray:
    """bool [B, Hq, Lq]: rows the engine compares (padded query rows excluded, SEMANTICS.md §7)."""
    rows = np.ones((case.B, case.Hq, case.Lq), dtype=bool)
    if case.seqlens_q is not None:
        for b, n in enumerate(case.seqlens_q):
            rows[b, :, n:] = False
    return rows


def _max_err(name: str, got: np.ndarray, want: np.ndarray, rows: np.ndarray, bound: float, case: Case) -> None:
    assert got.shape == want.shape, f"{name}: shape {got.shape} != oracle {want.shape} (case {case.id})"
    g, w = got[rows], want[rows]
    same_inf = np.array_equal(np.isinf(g), np.isinf(w)) and np.array_equal(np.sign(g[np.isinf(g)]),
                                                                              np.sign(w[np.isinf(w)]))
    assert same_inf, f"{name}: infinities differ from the oracle's (case {case.id})"
    finite = np.isfinite(w)
    assert np.all(np.isfinite(g[finite])), f"{name}: NaN/Inf where the oracle is finite (case {case.id})"
    err = np.abs(g[finite] - w[finite])
    worst = float(err.max()) if err.size else 0.0
    assert worst <= bound, f"{name}: max |err| {worst:.3g} > {bound:.3g} for {case.dtype} (case {case.id})"


def check_forward(adapter, case: Case, *, lse: bool = True, device: str = "cpu"):
    """Run forward, compare out (and LSE when returned) with the oracle; return (ForwardOutput, inputs)."""
    inputs = make_inputs(case)
    want_out, want_lse = reference(case, inputs)
    reason = adapter.supports(case, device)
    assert reason is None, f"{adapter.name} declined {case.id}: {reason}"
    fo = adapter.forward(inputs, case, device)
    rows = real_rows(case)
    bound = BOUND[case.dtype]
    _max_err("out", fo.out, want_out, rows[..., None].repeat(case.dv, -1), bound, case)
    if lse and fo.lse is not None:
        _max_err("lse", fo.lse, want_lse, rows, max(bound, 1e-12) * 4, case)
    assert fo.mutated_inputs == (), f"inputs reported mutated: {fo.mutated_inputs}"
    return fo, inputs


def check_backward(adapter, case: Case, *, device: str = "cpu"):
    inputs = make_inputs(case)
    dq, dk, dv = oracles.attention_backward(inputs.q, inputs.k, inputs.v, inputs.dout, mask=inputs.mask,
                                            bias=inputs.bias, **case.oracle_kwargs)
    reason = adapter.supports(case, device)
    assert reason is None, f"{adapter.name} declined {case.id}: {reason}"
    bo = adapter.backward(inputs, case, device)
    bound = 4 * BOUND[case.dtype]
    rows = real_rows(case)
    _max_err("dq", bo.dq, dq, rows[..., None].repeat(case.d, -1), bound, case)
    every = np.ones(dk.shape, dtype=bool)
    _max_err("dk", bo.dk, dk, every, bound, case)
    _max_err("dv", bo.dv, dv, np.ones(dv.shape, dtype=bool), bound, case)
    assert bo.mutated_inputs == ()
    return bo


def small_cases(families: tuple[str, ...], per_family: int = 5, cells: int = 40000) -> list[Case]:
    """Up to `per_family` cases of each of `families` of the CI catalog with B * Hq * Lq * Lk <= `cells`, in
    catalog order (the stand-in adapter tests: every feature a spelling translates, in seconds)."""
    from attention_conformance.cases import catalog

    picked: dict[str, list[Case]] = {f: [] for f in families}
    for c in catalog.cases("ci"):
        if c.family in picked and c.B * c.Hq * c.Lq * c.Lk <= cells and len(picked[c.family]) < per_family:
            picked[c.family].append(c)
    return [c for f in families for c in picked[f]]


def in_process_runner(adapter, cache=None):
    """(Runner, LoadedAdapter) running `adapter` in this interpreter (a stand-in library installed in
    ``sys.modules`` is seen; isolated workers would not see it), sharing the oracle `cache` when given."""
    from attention_conformance.adapters.registry import LoadedAdapter
    from attention_conformance.running.engine import Runner

    adapter.isolate = False
    la = LoadedAdapter(adapter.name, adapter.name, adapter, None)
    runner = Runner([la], "cpu", determinism="none")
    if cache is not None:
        runner.cache = cache
    return runner, la


def standalone_on_cpu(text: str):
    """A standalone repro file's text (`conformance.reproduce.standalone`) loaded as a module and pointed at the CPU,
    its preflight and versions stubbed: a stand-in library in ``sys.modules`` is what its imports find."""
    import types

    mod = types.ModuleType("standalone_repro")
    exec(compile(text, "standalone_repro.py", "exec"), mod.__dict__)
    mod.DEVICE = "cpu"
    mod.cannot_run_here = lambda: None
    mod.versions = lambda: "stand-in"
    return mod


def file_status(mod) -> tuple[int, str]:
    """(exit status of the file's ``main()``, what it printed)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = mod.main()
    return rc, out.getvalue()


@contextlib.contextmanager
def installed(modules: dict):
    """`modules` ({name: module}) in ``sys.modules`` for the block, what was there before restored after it (for
    work done at collection time, where pytest's monkeypatch is not available)."""
    import sys

    saved = {n: sys.modules.get(n) for n in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def spread_pairs(entries, adapter_for, cases, first, claims, per_entry: int = 2) -> list:
    """(entry, case) pairs: for each entry point, up to `per_entry` cases of different families that
    ``claims(adapter, case)`` accepts, the families in ``first(entry)`` tried first."""
    pairs = []
    for entry in entries:
        adapter, seen, wanted = adapter_for(entry), set(), first(entry)
        for case in sorted(cases, key=lambda c: c.family not in wanted):
            if case.family not in seen and claims(adapter, case):
                pairs.append((entry, case))
                seen.add(case.family)
            if len(seen) == per_entry:
                break
    return pairs
