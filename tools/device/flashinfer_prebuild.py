"""Build, before a run, every FlashInfer JIT module a profile needs through the flashinfer adapter's variants.

FlashInfer compiles each kernel module with nvcc on first use: minutes per module, inside whichever conformance
call asks first (the per-call timeout), one module at a time. This tool instead finds the modules first and builds
them in one ninja graph over all their source files, on every CPU core of the GPU host.

Run it on the GPU host, with flashinfer importable and the run's JIT settings (FLASHINFER_WORKSPACE_BASE,
FLASHINFER_CUDA_ARCH_LIST) in the environment (tools/device/fi_xf.sh sets them):

    python tools/device/flashinfer_prebuild.py --profile gpu [--entry ENTRY ...] [--list]

How it finds the modules: for each variant and each kind of case it claims (one case per combination of dtype,
head dims, window, soft cap, mask, causal, sinks, paging, decode row, lengths), it calls the adapter's forward with
FlashInfer's JIT step (``JitSpec.build_and_load``) replaced by a recorder: a module already built (or installed
ahead of time) loads as usual and the forward goes on; a missing one is recorded and a stub is returned, whose first
use ends that forward.
The recorded specs are the ones the run will ask for (FlashInfer's own dispatch chose the backend and arguments);
``flashinfer.jit.build_jit_specs`` then builds them together. The merge spellings' cascade module is added when
they claim anything (their forward stops at its first prefill call).
"""

from __future__ import annotations

import argparse
import sys
import time

from attention_conformance.adapters import flashinfer as fi
from attention_conformance.cases import catalog
from attention_conformance.cases.case import page_size_of
from attention_conformance.cases.inputs import make_inputs


class _Recorded(Exception):
    """Raised by a stub module: the forward that asked for it has shown which module it needs."""


class _Stub:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        def call(*args, **kwargs):
            raise _Recorded(f"{self._name}.{attr}")

        return call


def kind_of(entry: str, case) -> tuple:
    """What decides the modules a call builds: the spelling and the case's dtype, head dims and mask features."""
    fp8 = None if case.fp8 is None else case.fp8.format
    return (entry, case.dtype, fp8, case.d, case.dv, case.window is not None, bool(case.softcap),
            case.mask is not None or case.chunk is not None, case.causal, case.sinks is not None,
            page_size_of(case.layout) is not None, case.Lq == 1, case.varlen)


def record_specs(entries: list[str | None], cases, device: str = "cuda") -> tuple[dict, dict]:
    """({module name: JitSpec} that are not built yet, {variant: claimed case count}) for `entries` on `cases`."""
    from flashinfer.jit import core

    specs: dict = {}
    claimed: dict[str, int] = {}
    original = core.JitSpec.build_and_load

    def recorder(spec):
        if getattr(spec, "is_aot", False) or spec.is_compiled:  # installed or built before: load it and go on
            return original(spec)
        specs.setdefault(spec.name, spec)
        return _Stub(spec.name)

    core.JitSpec.build_and_load = recorder
    seen: set[tuple] = set()
    merge = False
    try:
        adapters = [fi.FlashInfer(e) for e in entries]
        for case in cases:
            inputs = None
            for adapter in adapters:
                if adapter.supports(case, device) is not None:
                    continue
                claimed[adapter.name] = claimed.get(adapter.name, 0) + 1
                entry, form, _ = adapter._pick(case)
                key = kind_of(entry, form)
                if key in seen:
                    continue
                seen.add(key)
                merge = merge or fi.SPELLINGS[entry].kind == "merge"
                inputs = inputs if inputs is not None else make_inputs(case)
                try:
                    adapter.forward(inputs, case, device)
                except _Recorded:
                    pass
                except Exception as exc:  # noqa: BLE001 - report and go on: the run itself will judge the case
                    print(f"  {adapter.name} {case.id}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
    finally:
        core.JitSpec.build_and_load = original
    if merge:
        from flashinfer.jit.cascade import gen_cascade_module

        cascade = gen_cascade_module()
        if not (getattr(cascade, "is_aot", False) or cascade.is_compiled):
            specs.setdefault(cascade.name, cascade)
    return specs, claimed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="gpu", choices=catalog.PROFILES)
    p.add_argument("--entry", action="append", default=None,
                   help="variant entry point (repeatable; 'auto' = plain flashinfer); default: every variant")
    p.add_argument("-k", dest="keyword", default=None, help="case selection, as for `run -k`")
    p.add_argument("--list", action="store_true", help="print the modules to build and stop")
    args = p.parse_args(argv)
    entries = [None if e == "auto" else e for e in (args.entry or ["auto", *fi.SPELLINGS])]
    for e in entries:
        if e is not None and e not in fi.SPELLINGS:
            p.error(f"--entry {e!r}: flashinfer has no such entry point; entry points: auto, {', '.join(fi.SPELLINGS)}")
    cases = catalog.select(catalog.cases(args.profile), args.keyword)
    t0 = time.perf_counter()
    specs, claimed = record_specs(entries, cases)
    print(f"{len(specs)} module(s) to build for {len(cases)} {args.profile} case(s), found in "
          f"{time.perf_counter() - t0:.0f} s; claimed: {claimed}")
    for name in sorted(specs):
        print("  " + name)
    if args.list or not specs:
        return 0
    from flashinfer.jit import build_jit_specs

    t0 = time.perf_counter()
    build_jit_specs(list(specs.values()), verbose=False)
    print(f"built {len(specs)} module(s) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
