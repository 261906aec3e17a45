"""The data that crosses the adapter boundary: inputs handed to an adapter, what its calls return.

`CaseInputs` (the FP64 arrays of one case), `ForwardOutput` and `BackwardOutput` (what an adapter
returns, conformance/adapters/base.py describes the protocol), `CallResult` (one call as the harness
saw it: the output or the exception, which inputs changed, how long it took) and `AdapterResults`
(every call the harness made for one case, the input of `conformance.verdict.judge.judge`).

Where an exception came from decides its verdict (SEMANTICS.md §15 is about inputs, this is about
code): an exception raised by the code under test is the adapter's (a claimed feature that raises is
a FAIL); one raised by harness code around it (translating the case, preparing tensors, reading the
results) is HARNESS_ERROR. Adapters that wrap code under test mark the call with `under_test`; for an
adapter that does not (a third-party `Adapter` subclass), its whole ``forward`` / ``backward`` is code
under test (`Adapter.marks_code_under_test`).

One exception is not a failure: `CallDeclined`, raised by an adapter when the library under test refuses
the call *itself*, with its own reason, before computing anything (torch SDPA's "No available kernel"
under a pinned backend: its dispatcher checked the inputs and declined). `supports()` is the first line
(it asks the library beforehand where it can); `CallDeclined` is the backstop for refusals a dry query
cannot foresee. The verdict is NOT_SUPPORTED with the library's words, never PASS, and never FAIL: the
library computed nothing wrong, it said no.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "AdapterResults",
    "BackwardOutput",
    "CallResult",
    "CallDeclined",
    "CaseInputs",
    "ForwardOutput",
    "raise_site",
    "raised_under_test",
    "under_test",
]

_MARK = "conformance_raised_under_test"


@dataclass
class CaseInputs:
    """FP64 arrays for one case, every value exactly representable in the case dtype.

    q [B, Hq, Lq, d], k [B, Hkv, Lk, d], v [B, Hkv, Lk, dv], dout [B, Hq, Lq, dv] (backward),
    mask bool broadcastable to [B, Hq, Lq, Lk] (True = attend) or None, bias float64 likewise or
    None. For FP8 cases, `fp8` holds the quantized codes (as float64 values of the FP8 grid) and the
    descales; q/k/v are then the dequantized values the oracle sees (SEMANTICS.md §10).

    For a paged layout (`conformance.cases.case.PAGED_LAYOUTS`) `paged` holds the K/V *storage* a paged kernel
    reads (SEMANTICS.md §16): ``k_pool`` [num_pages, Hkv, page_size, d], ``v_pool`` [num_pages, Hkv,
    page_size, dv] (float64), ``block_table`` int32 [B, ceil(Lk / page_size)] and ``page_size``; logical key
    j of batch b is ``pool[block_table[b, j // page_size], :, j % page_size]``, and every page, slot or table
    entry a kernel must not read leads to NaN. k/v stay the dense logical arrays the oracle sees.

    ``sinks`` float64 [Hq]: the sink logit of each query head (SEMANTICS.md §18), for cases with ``Case.sinks``.
    ``dlse`` float64 [B, Hq, Lq]: the LSE cotangent of an ``lse_grad`` backward case (§13, §18).
    ``kv_append`` (KV-cache append, §20): ``k_cache`` [B, Hkv, Lk, d], ``v_cache`` [B, Hkv, Lk, dv] with NaN in
    every slot at or past ``cache_seqlens[b]``, the new rows ``k_new`` [B, Hkv, Lq, d], ``v_new``, and
    ``cache_seqlens`` int32 [B]; k/v are then the appended caches the oracle sees (NaN past cache_seqlens + Lq).
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    dout: np.ndarray | None = None
    mask: np.ndarray | None = None
    bias: np.ndarray | None = None
    fp8: dict[str, Any] | None = None
    paged: dict[str, Any] | None = None
    sinks: np.ndarray | None = None
    dlse: np.ndarray | None = None
    kv_append: dict[str, Any] | None = None

    def fp8_codes(self, spec) -> dict[str, Any]:
        """The quantized inputs of an FP8 case: the engine's (`fp8`), else q/k/v quantized by `spec` (a
        `conformance.cases.case.FP8Spec`) exactly as the engine does (SEMANTICS.md §10-§11)."""
        if self.fp8 is not None:
            return self.fp8
        from attention_conformance.oracles import fp8

        return fp8.quantize_attention_inputs(self.q, self.k, self.v, **spec.quantize_kwargs())

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array field that is set, by name (used for the input-mutation check).

        The arrays of ``paged`` are included as ``"paged.k_pool"``, ``"paged.v_pool"``,
        ``"paged.block_table"``, so a kernel that writes into the page pool or the table is caught too.
        """
        named = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out = {k: v for k, v in named.items() if isinstance(v, np.ndarray)}
        if self.paged:
            out.update({f"paged.{k}": v for k, v in self.paged.items() if isinstance(v, np.ndarray)})
        if self.kv_append:
            out.update({f"kv_append.{k}": v for k, v in self.kv_append.items() if isinstance(v, np.ndarray)})
        return out



@dataclass
class ForwardOutput:
    """What one forward call returned, as float64 NumPy copies (the adapter protocol, adapters/base.py)."""

    out: np.ndarray  # float64 [B, Hq, Lq, dv]
    lse: np.ndarray | None = None  # float64 [B, Hq, Lq], natural log
    out_dtype: str | None = None  # dtype the kernel produced (before the float64 copy)
    kernels: tuple[str, ...] = ()  # kernel names observed to run (profiler), when known
    mutated_inputs: tuple[str, ...] = ()  # names of adapter-side inputs changed by the call
    unwritten: int = 0  # elements of a poisoned out= buffer left unwritten
    lse_convention: str = "-inf"  # what the adapter writes for fully masked rows, e.g. "+inf"
    notes: list[str] = field(default_factory=list)
    out_device: str | None = None  # device the kernel's output lived on ("cpu", "cuda:0"), when known
    #: an FP8 output's scale: the kernel wrote codes of out * out_scale, `out` holds them divided back (§10)
    out_scale: float = 1.0


@dataclass
class BackwardOutput:
    """What one backward call returned: dq, dk, dv (and d sinks) of sum(out * dout) + sum(lse * dlse)
    (SEMANTICS.md §13, §18)."""

    dq: np.ndarray  # float64 [B, Hq, Lq, d]
    dk: np.ndarray  # float64 [B, Hkv, Lk, d]
    dv: np.ndarray  # float64 [B, Hkv, Lk, dv]
    out: ForwardOutput | None = None  # the forward of the same call, when computed together
    dsinks: np.ndarray | None = None  # float64 [Hq] for sink cases (SEMANTICS.md §18)
    kernels: tuple[str, ...] = ()
    mutated_inputs: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


class CallDeclined(Exception):  # noqa: N818 (a verdict, not an error: the library declined the call)
    """The library under test refused this call itself, with `reason` (its own words); the judge reports
    NOT_SUPPORTED with it. Raise it only for a refusal that computed nothing (a dispatcher or argument check
    of the library), never for a crash, a compile error or a wrong result."""


@contextmanager
def under_test() -> Iterator[None]:
    """Marks an exception raised inside the block as raised by the code under test (not the harness)."""
    try:
        yield
    except Exception as exc:
        setattr(exc, _MARK, True)
        raise


def raised_under_test(exc: BaseException) -> bool:
    """True when `exc` left an `under_test` block."""
    return bool(getattr(exc, _MARK, False))


def raise_site(exc: BaseException) -> str:
    """``file:line in function`` of the frame that raised `exc` (the innermost frame of its traceback)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "unknown frame"
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}"


@dataclass
class CallResult:
    """What one adapter call produced, as the harness saw it (`conformance.running.worker.call_adapter`)."""

    output: Any = None  # ForwardOutput | BackwardOutput
    error: str | None = None  # formatted traceback when the call raised
    error_type: str | None = None
    mutated: list[str] = field(default_factory=list)  # CaseInputs arrays changed by the call
    #: for each of them, which values changed and where (`conformance.verdict.checks.array_change`)
    mutated_where: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    #: who raised `error`: "adapter" (the code under test), "harness" (code around it) or "resources" (the device ran
    #: out of memory: `running.cuda_context.out_of_memory`; HARNESS_ERROR, not a verdict)
    error_origin: str | None = None
    error_site: str | None = None  # `raise_site` of the exception
    memory: dict | None = None  # peak device memory of the call on CUDA (running.peak_memory.MemoryRecord), else None
    #: why the process's CUDA context could not run another call after this one raised (a sticky error,
    #: `running.cuda_context.unusable`): the process that made the call makes no more calls
    context_lost: str | None = None


@dataclass
class AdapterResults:
    """Every call the harness made for one (adapter, case): the input of `conformance.verdict.judge.judge`.

    ``backward`` is set for backward cases, ``repeat`` (a second identical forward) when bitwise
    determinism is checked; a call that was not made is None.
    """

    forward: CallResult
    backward: CallResult | None = None
    repeat: CallResult | None = None
