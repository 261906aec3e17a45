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
they claim anything (their forward stops at its first prefill call). A forward whose first missing module is a
helper stops there too, and FlashInfer caches the stub for the process: custom_mask's and the merge spellings' FA2
prefill modules sit behind ``packbits`` (the ``quantization`` module), so on the GPU they are listed only once that
module is built or installed (a second prebuild); the offline mode below lists them at once.

Offline (``--offline-arch 9.0a``, or ``fi_xf.sh offline-prebuild``): the same modules found and built on a machine
without a GPU but with nvcc (the GPU host's CUDA major: 13), so that the GPU session carries them (``fi_xf.sh
pack-jit``, then ``install`` there loads them as FlashInfer's AOT modules) instead of compiling. What differs:

- the claims are asked for "cuda" and the forwards run on CPU tensors, inside `offline_cuda.offline_cuda`, which
  answers the device questions FlashInfer's Python asks before it picks a module as one sm_90a device would
  (compute capability (9, 0); ``torch.version.cuda`` of the host's torch, ``--offline-cuda``, default 13.0: torch
  2.11+cu130); FlashInfer's own capability helpers, which refuse a CPU tensor's device, give that capability too;
  the batch wrappers' page-locked buffers are plain ones (a CPU-only torch has no pinned allocator);
- FLASHINFER_CUDA_ARCH_LIST is set to the ``--offline-arch`` (a different value set before is an error), so the
  build targets sm_90a and FlashInfer's cache folder is named as on the host (.../<version>/90a/cached_ops);
- the stubs do nothing instead of ending the forward (no kernel can run here), so a forward that needs two modules
  (custom_mask's ``packbits`` module before its prefill module, merge_state's cascade after it) records both in one
  pass; an exception after a stub's call is expected (it ran on garbage) and is not reported;
- the modules are built one ninja graph each, most used first (`build_in_order`, MAX_JOBS jobs), so what is done
  when time runs out is the most used part, complete and packable.

Why the specs are the host's: a module's name and sources follow from what FlashInfer's Python decides from the
call's arguments (dtypes, head dims, mask mode, window, soft cap, sinks, paging, index type) and from the device's
compute capability and torch's CUDA version (FA3 where ``is_sm90a_supported`` and the FA3 limits allow, FA2
otherwise); the first set is the adapter's own, unchanged, the second is what the fake answers as the H200 does.
Tensor data and addresses never pick a module, nor do the SM count and memory size answered (the H200's, for code
that asks). Checked on the H200 (2026-12-04, gpu profile, every variant): its recorder listed 29 modules, the
offline one 37: the same 29 and the 8 FA2 prefill modules behind ``packbits``. The modules link no torch or Python
(torch gives only its _GLIBCXX_USE_CXX11_ABI, 1 in both builds): they need libcudart.so.13, libstdc++ (up to
GLIBCXX_3.4.29; the host's has 3.4.33), libc (GLIBC_2.34, the quantization module's dlopen; the host's is 2.39) and
tvm-ffi's C symbols, which the host's process has loaded. Built here (2 cores, shared, ``nice``): FA2 and decode
modules 0.2-1 min each, FA3 single prefill 2.6-5 min, FA3 batch prefill and sink 5-11 min; 27 modules pack to 5.6 MB.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import offline_cuda

from attention_conformance.adapters import flashinfer as fi
from attention_conformance.cases import catalog
from attention_conformance.cases.case import page_size_of
from attention_conformance.cases.inputs import make_inputs


class _Recorded(Exception):
    """Raised by a stub module: the forward that asked for it has shown which module it needs."""


class _Stub:
    """What a missing module's ``build_and_load`` returns while recording. On a GPU its first call ends the forward
    (`_Recorded`: a real kernel must not run on what a stub left uncomputed). Offline (`calls`) every call does
    nothing and returns None: no kernel can run there, and FlashInfer's modules write into buffers the caller
    allocated, so the forward goes on to the next module it needs (custom_mask's ``packbits`` before the prefill
    module, the merge spellings' cascade after it); what it computes is garbage and dropped."""

    def __init__(self, name: str, calls: list[str] | None = None):
        self._name = name
        self._calls = calls  # offline: where each call is noted (a forward that made one may fail after it)

    def __getattr__(self, attr):
        def call(*args, **kwargs):
            if self._calls is None:
                raise _Recorded(f"{self._name}.{attr}")
            self._calls.append(f"{self._name}.{attr}")

        return call


def kind_of(entry: str, case) -> tuple:
    """What decides the modules a call builds: the spelling and the case's dtype, head dims and mask features."""
    fp8 = None if case.fp8 is None else case.fp8.format
    return (entry, case.dtype, fp8, case.d, case.dv, case.window is not None, bool(case.softcap),
            case.mask is not None or case.chunk is not None, case.causal, case.sinks is not None,
            page_size_of(case.layout) is not None, case.Lq == 1, case.varlen)


def record_specs(entries: list[str | None], cases, device: str = "cuda", *,
                 run_device: str | None = None) -> tuple[dict, dict[str, int], list[str]]:
    """({module name: JitSpec} not built yet, {module name: claimed cases of the kinds that first asked for it}, the
    forwards that raised before asking for a missing module) for `entries` on `cases`. Claims are asked for `device`;
    the forwards (one per `kind_of`, most claimed kinds first) run on `run_device` (default `device`; offline, "cpu":
    the stubs then let a forward go on past a missing module)."""
    from flashinfer.jit import core

    run_device = run_device or device
    offline = run_device != device
    adapters = [fi.FlashInfer(e) for e in entries]
    kinds: dict[tuple, list] = {}  # kind -> [adapter, first case, claimed cases]
    for case in cases:
        for adapter in adapters:
            if adapter.supports(case, device) is not None:
                continue
            entry, form, _ = adapter._pick(case)
            kinds.setdefault(kind_of(entry, form), [adapter, case, 0])[2] += 1
    specs: dict = {}
    uses: dict[str, int] = {}
    raised: list[str] = []
    stub_calls: list[str] = []
    built: set[str] = set()
    original = core.JitSpec.build_and_load

    def recorder(spec):
        if getattr(spec, "is_aot", False) or spec.is_compiled:  # installed or built before
            if not offline:
                return original(spec)  # load it and go on
            built.add(spec.name)  # offline a stub stands in: loading checks the build (ninja) and no kernel runs here
        else:
            specs.setdefault(spec.name, spec)
        return _Stub(spec.name, stub_calls if offline else None)

    core.JitSpec.build_and_load = recorder
    merge = 0
    try:
        for key, (adapter, case, count) in sorted(kinds.items(), key=lambda kv: -kv[1][2]):
            if fi.SPELLINGS[key[0]].kind == "merge":
                merge += count
            before, calls = set(specs), len(stub_calls)
            try:
                adapter.forward(make_inputs(case), case, run_device)
            except _Recorded:
                pass
            except Exception as exc:  # noqa: BLE001 - report and go on: the run itself will judge the case
                if len(stub_calls) == calls:  # offline past a stub's call, the rest ran on garbage: expected
                    raised.append(f"{adapter.name} {case.id}: {type(exc).__name__}: {str(exc)[:200]}")
            for name in set(specs) - before:
                uses[name] = uses.get(name, 0) + count
    finally:
        core.JitSpec.build_and_load = original
    if merge:
        from flashinfer.jit.cascade import gen_cascade_module

        cascade = gen_cascade_module()
        if not (getattr(cascade, "is_aot", False) or cascade.is_compiled) and cascade.name not in specs:
            specs[cascade.name] = cascade
            uses[cascade.name] = merge
    if built:
        print(f"{len(built)} module(s) built before: " + ", ".join(sorted(built)))
    return specs, uses, raised


def _offline_setup(arch_text: str) -> offline_cuda.OfflineArch:
    """Parse ``--offline-arch`` and make FlashInfer's JIT target it: FLASHINFER_CUDA_ARCH_LIST is read when flashinfer
    is imported (its cache folder is named after it), so it is set here, before; a different value is an error."""
    arch = offline_cuda.parse_arch(arch_text)
    listed = os.environ.get("FLASHINFER_CUDA_ARCH_LIST")
    if listed is not None and listed.split() != [arch.spelling]:
        raise ValueError(f"--offline-arch {arch.spelling} but FLASHINFER_CUDA_ARCH_LIST={listed!r}: the modules would "
                         "be built for another target than the one recorded for")
    if "flashinfer" in sys.modules and listed is None:
        raise ValueError("flashinfer was imported before --offline-arch could set FLASHINFER_CUDA_ARCH_LIST")
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = arch.spelling
    return arch


def build_in_order(specs: dict, order: list[str]) -> None:
    """Build the modules one ninja graph each, in `order` (most used first), printing each one's time: on a small
    machine what is done when time runs out is the most used part, already complete and packable."""
    from flashinfer.jit import build_jit_specs

    for i, name in enumerate(order, 1):
        t0 = time.perf_counter()
        build_jit_specs([specs[name]], verbose=False)
        so = specs[name].jit_library_path
        size = f"{so.stat().st_size / 1e6:.1f} MB" if so.exists() else "no .so"
        print(f"built {i}/{len(order)} {name}: {(time.perf_counter() - t0) / 60:.1f} min, {size}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="gpu", choices=catalog.PROFILES)
    p.add_argument("--entry", action="append", default=None,
                   help="variant entry point (repeatable; 'auto' = plain flashinfer); default: every variant")
    p.add_argument("-k", dest="keyword", default=None, help="case selection, as for `run -k`")
    p.add_argument("--list", action="store_true", help="print the modules to build and stop")
    p.add_argument("--offline-arch", metavar="ARCH", default=None,
                   help="no GPU here: record as on one device of ARCH (FLASHINFER_CUDA_ARCH_LIST's spelling, 9.0a "
                        "for the H200), forwards on CPU tensors, then build the modules one at a time, most used "
                        "first, with this machine's nvcc (MAX_JOBS jobs)")
    p.add_argument("--offline-cuda", metavar="VERSION", default="13.0",
                   help="torch.version.cuda of the GPU host's torch, faked offline (default 13.0: torch 2.11+cu130)")
    args = p.parse_args(argv)
    entries = [None if e == "auto" else e for e in (args.entry or ["auto", *fi.SPELLINGS])]
    for e in entries:
        if e is not None and e not in fi.SPELLINGS:
            p.error(f"--entry {e!r}: flashinfer has no such entry point; entry points: auto, {', '.join(fi.SPELLINGS)}")
    arch = None
    if args.offline_arch is not None:
        try:
            arch = _offline_setup(args.offline_arch)
        except ValueError as exc:
            p.error(str(exc))
    cases = catalog.select(catalog.cases(args.profile), args.keyword)
    t0 = time.perf_counter()
    if arch is None:
        specs, uses, raised = record_specs(entries, cases)
    else:
        import flashinfer

        with offline_cuda.offline_cuda(arch, args.offline_cuda, flashinfer=flashinfer):
            specs, uses, raised = record_specs(entries, cases, run_device="cpu")
    order = sorted(specs, key=lambda n: (-uses.get(n, 0), n))
    where = f" offline for sm_{arch.major}{arch.minor}{arch.suffix}" if arch else ""
    print(f"{len(specs)} module(s) to build for {len(cases)} {args.profile} case(s), found in "
          f"{time.perf_counter() - t0:.0f} s{where}")
    for name in order:
        print(f"  {uses.get(name, 0):4d} case(s)  {name}")
    for line in raised:
        print("  raised before asking for a module: " + line, file=sys.stderr)
    if args.list or not specs:
        return 0
    t0 = time.perf_counter()
    if arch is None:
        from flashinfer.jit import build_jit_specs

        build_jit_specs(list(specs.values()), verbose=False)
    else:
        build_in_order(specs, order)
    print(f"built {len(specs)} module(s) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
