"""Shared helpers of the torch-based adapters: inputs in, results out, masks, mutation and kernel records.

What lives here (oracles/SEMANTICS.md is the contract each helper implements):

- `to_torch` / `materialize`: the engine's FP64 arrays (exactly representable in the case dtype) become
  tensors of the case dtype on the device, laid out per ``case.layout`` (SEMANTICS.md §1 layout;
  conformance/cases/case.py `LAYOUTS`): ``contiguous`` [B, H, L, D]; ``bshd`` a contiguous [B, L, H, D]
  tensor transposed to [B, H, L, D] (non-contiguous strides); ``kv_broadcast`` K and V one
  [1, Hkv, Lk, D] tensor ``expand``-ed to B with batch stride 0 (the inputs must then be identical
  across the batch; otherwise a ValueError says which array and which batch differs).
- `visibility`: the dense boolean "key j takes part for query i" array for the semantics SDPA-style
  APIs cannot express natively: causal in either alignment (§4), sliding windows (§5), varlen padding
  (§7), combined with the case's own boolean mask (§6); built on `oracles.visibility`. Padded query
  rows (i >= seqlens_q[b]) are fully masked rows (§8, §17): an SDPA-signature function sees them as
  rows it must not attend from; the engine does not compare them.
- `snapshot` / `changed`: bitwise copies of what an adapter hands to a kernel and the names of those
  changed by the call (`ForwardOutput.mutated_inputs`), each with which of its values changed and where
  (`Mutated.where`: the judge's message names them).
- `KernelRecorder`: on CUDA, the names of the device kernels that actually ran (torch.profiler,
  CUDA activity); on CPU it records nothing and claims nothing.
- `autograd_output`: the `BackwardOutput` of a backward taken through torch autograd (§13).
- `code_under_test`: `conformance.cases.calldata.under_test` for a torch call, waiting for the device at the end
  of the block, so an asynchronous CUDA error of the kernel surfaces inside it (the kernel's, not the
  harness's next synchronisation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

try:  # torch is optional for the harness as a whole; the torch adapters report it as unavailable
    import torch
except ImportError:  # pragma: no cover - exercised only on machines without torch
    torch = None  # type: ignore[assignment]

from attention_conformance.adapters.base import BackwardOutput, CaseInputs, ForwardOutput
from attention_conformance.cases.calldata import under_test
from attention_conformance.cases.case import Case

__all__ = [
    "TORCH_DTYPES",
    "TORCH_PROCESS_GROUP",
    "KernelRecorder",
    "Materialized",
    "autograd_output",
    "changed",
    "code_under_test",
    "cuda_capability",
    "cuda_unavailable_reason",
    "device_unavailable_reason",
    "dtype_name",
    "empty_rows",
    "float_mask",
    "fully_masked_rows",
    "materialize",
    "missing_kernel_note",
    "neutral_padded_bias",
    "snapshot",
    "to_numpy",
    "to_torch",
    "torch_dtype",
    "torch_import_error",
    "translate_empty_lse",
    "visibility",
]

#: the worker process torch's own attention shares on CUDA (`running.worker.worker_key`): SDPA's four backends, flex and
#: cuDNN's FP8 graph are one library, as one program loads them; a process per adapter made 8 CUDA contexts of ~620 MiB
#: per run worker (tox -e gpu on the H100: 60-odd processes, and the gpu profile's large cases ran out of memory)
TORCH_PROCESS_GROUP = "torch"

TORCH_DTYPES: dict[str, str] = {
    "float64": "float64",
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}


def torch_import_error() -> str | None:
    """None when torch imports here; otherwise the reason, for `unavailable_reason`."""
    return None if torch is not None else "torch is not importable in this Python environment"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a case dtype name (conformance/cases/case.py `DTYPES`)."""
    if name not in TORCH_DTYPES:
        raise ValueError(f"dtype {name!r} is not one of {sorted(TORCH_DTYPES)}")
    return getattr(torch, TORCH_DTYPES[name])


def dtype_name(dtype: torch.dtype) -> str:
    """'float16' for torch.float16 (the form `ForwardOutput.out_dtype` uses)."""
    return str(dtype).removeprefix("torch.")


def cuda_capability() -> tuple[int, int] | None:
    """(major, minor) of the current CUDA device, or None without one."""
    if torch is None or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]


def device_unavailable_reason(device: str) -> str | None:
    """Why torch cannot run on `device` here ("cpu", "cuda", "cuda:N"); None when it can."""
    reason = torch_import_error()
    if reason:
        return reason
    kind = device.split(":")[0]
    if kind == "cpu":
        return None
    if kind == "cuda":
        if not torch.cuda.is_available():
            build = torch.version.cuda
            return ("torch has no CUDA device here" + (f" (CUDA {build} build)" if build else " (CPU-only build)"))
        return None
    return f"device {device!r} is not one the torch adapters know (cpu, cuda)"


# -- inputs -------------------------------------------------------------------------------------------
def cuda_unavailable_reason(device: str, name: str, min_cc: tuple[int, int], builds: str = "") -> str | None:
    """Why adapter `name`, which runs CUDA code built for compute capability `min_cc` and up (`builds`: which, for
    the message), cannot run on `device` here: no torch or device, not a CUDA device, an older GPU; None when it can."""
    reason = device_unavailable_reason(device)
    if reason:
        return reason
    if not device.startswith("cuda"):
        return f"{name} runs on CUDA devices only (asked for {device!r})"
    cap = cuda_capability()
    if cap is None or cap < min_cc:
        return (f"{name} needs compute capability >= {min_cc[0]}.{min_cc[1]}" + (f" ({builds})" if builds else "")
                + f"; device has {cap}")
    return None


def to_torch(array: np.ndarray, dtype: torch.dtype, device: str, *, name: str = "array") -> torch.Tensor:
    """A contiguous tensor of `dtype` on `device` holding exactly the values of FP64 `array`.

    The engine makes every value exactly representable in the case dtype, so the cast is exact; a
    value that does not survive the round trip is a harness error, raised with its index.
    """
    src = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
    out = src.to(dtype)
    back = out.to(torch.float64)
    if not torch.equal(back.nan_to_num(0.0, 1.0, -1.0), src.nan_to_num(0.0, 1.0, -1.0)):
        bad = torch.nonzero(back != src)[0].tolist()
        raise ValueError(
            f"input {name!r} shape {tuple(array.shape)}: value {float(array[tuple(bad)])!r} at index {tuple(bad)} "
            f"is not exactly representable in {dtype_name(dtype)} (rounds to {back[tuple(bad)].item()!r}); "
            "the engine must make inputs exactly representable in the case dtype"
        )
    return out.to(device)


def _batch_shared(array: np.ndarray, name: str) -> np.ndarray:
    """array[:1] after checking that every batch entry equals batch 0 (for the kv_broadcast layout)."""
    for b in range(1, array.shape[0]):
        if not np.array_equal(array[b], array[0], equal_nan=True):
            where = np.argwhere(array[b] != array[0])[0].tolist()
            raise ValueError(
                f"layout 'kv_broadcast' needs {name} identical across the batch, but {name}{[b] + where} = "
                f"{float(array[(b, *where)])!r} != {name}{[0] + where} = {float(array[(0, *where)])!r} "
                f"(shape {array.shape})"
            )
    return array[:1]


def _laid_out(array: np.ndarray, dtype: torch.dtype, device: str, layout: str, name: str,
              requires_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(leaf, view): `leaf` is the tensor that owns the memory, `view` the [B, H, L, D] tensor a kernel sees."""
    if layout == "bshd":
        leaf = to_torch(array.transpose(0, 2, 1, 3), dtype, device, name=name).requires_grad_(requires_grad)
        return leaf, leaf.transpose(1, 2)
    if layout == "kv_broadcast":
        leaf = to_torch(_batch_shared(array, name), dtype, device, name=name).requires_grad_(requires_grad)
        return leaf, leaf.expand(array.shape[0], *leaf.shape[1:])
    if layout != "contiguous":
        raise ValueError(f"unknown layout {layout!r} for {name}")
    leaf = to_torch(array, dtype, device, name=name).requires_grad_(requires_grad)
    return leaf, leaf


@dataclass
class Materialized:
    """The tensors an adapter hands to a kernel for one case (q, k, v in [B, H, L, D] views)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor | None = None
    leaves: dict[str, torch.Tensor] = field(default_factory=dict)

    def named(self) -> dict[str, torch.Tensor]:
        out = {"q": self.q, "k": self.k, "v": self.v}
        if self.dout is not None:
            out["dout"] = self.dout
        return out


def materialize(inputs: CaseInputs, case: Case, device: str, *, dtype: torch.dtype | None = None,
                requires_grad: bool = False, layout: str | None = None) -> Materialized:
    """q, k, v (and dout when present) as tensors of the case dtype on `device` in ``case.layout``.

    ``kv_broadcast`` affects K and V only (q and dout are contiguous); ``bshd`` applies to q, k, v
    and dout (non-contiguous dO is its own bug class: flash-attention #355). With `requires_grad`,
    gradients are taken with respect to the returned views (`torch.autograd.grad`), so dK, dV keep
    their per-batch shape even for stride-0 K and V. With varlen, dout is zeroed on padded query rows
    (SEMANTICS.md §7, §13, §17: their dout is ignored; it is the harness's own tensor, handed to autograd).
    """
    dtype = torch_dtype(case.dtype) if dtype is None else dtype
    layout = case.layout if layout is None else layout
    kv_layout = layout
    q_layout = "contiguous" if layout == "kv_broadcast" else layout
    leaves = {}
    views = {}
    for name, array, lay in (("q", inputs.q, q_layout), ("k", inputs.k, kv_layout), ("v", inputs.v, kv_layout)):
        leaves[name], views[name] = _laid_out(array, dtype, device, lay, name, requires_grad)
    dout = None
    if inputs.dout is not None:
        d = inputs.dout
        if case.seqlens_q is not None:  # §7/§13/§17: padded rows' dout is ignored; zero it so they add
            d = np.array(d, dtype=np.float64)  # nothing to dk, dv whatever the kernel does with them
            for b, n in enumerate(case.seqlens_q):
                d[b, :, int(n):, :] = 0.0
        _, dout = _laid_out(d, dtype, device, q_layout, "dout", False)
    return Materialized(q=views["q"], k=views["k"], v=views["v"], dout=dout, leaves=leaves)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A float64 NumPy copy of `tensor` (any dtype, any device, any strides)."""
    return tensor.detach().to("cpu").to(torch.float64).contiguous().numpy().copy()


def autograd_output(out: torch.Tensor, grads: Sequence[torch.Tensor], rec: KernelRecorder,
                    mutated: tuple[str, ...], *, lse: torch.Tensor | None = None,
                    notes: Sequence[str] = ()) -> BackwardOutput:
    """`BackwardOutput` of a backward taken through autograd: float64 copies of ``grads`` = (dq, dk, dv)
    (SEMANTICS.md §13) and of the forward `out` (and `lse` when given) of the same call; the kernels
    `rec` saw and the `mutated` input names go on both the forward and the backward record."""
    dq, dk, dv = grads
    fwd = ForwardOutput(
        out=to_numpy(out), lse=None if lse is None else to_numpy(lse), out_dtype=dtype_name(out.dtype),
        out_device=str(out.device), kernels=rec.names, mutated_inputs=mutated,
    )
    return BackwardOutput(dq=to_numpy(dq), dk=to_numpy(dk), dv=to_numpy(dv), out=fwd, kernels=rec.names,
                          mutated_inputs=mutated, notes=list(notes))


@contextmanager
def code_under_test(device) -> Iterator[None]:
    """`under_test` (exceptions inside are the code under test's) that synchronises a CUDA `device` before
    leaving, so an asynchronous kernel error is raised here and not in the harness code that reads results."""
    with under_test():
        yield
        if str(device).startswith("cuda") and torch is not None and torch.cuda.is_available():
            torch.cuda.synchronize()


# -- mutation check ----------------------------------------------------------------------------------
def snapshot(tensors: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """Bitwise copies of the tensors handed to a kernel (None entries skipped)."""
    return {k: t.detach().clone() for k, t in tensors.items() if t is not None}


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().reshape(-1)  # 1-d: a 0-d tensor (a per-tensor FP8 descale) has no byte view
    return t.view(torch.uint8) if t.dtype != torch.bool else t


class Mutated(tuple):
    """The names of the inputs a call changed (a tuple, as `ForwardOutput.mutated_inputs` holds), with ``where``:
    for each, which of its values changed and where, in the layout it was handed (`tensor_change`)."""

    where: dict[str, str]

    def __new__(cls, names: Iterable[str] = (), where: dict[str, str] | None = None) -> Mutated:
        self = super().__new__(cls, tuple(names))
        self.where = dict(where or {})
        return self

    def __reduce__(self):  # pickles with its ``where`` (results cross the worker pipe)
        return (Mutated, (tuple(self), self.where))


#: integer views of each element's bits, by element size (a NaN compares equal to itself through them)
_ELEMENT_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def tensor_change(name: str, old: torch.Tensor, now: torch.Tensor | None) -> str:
    """Which values of input ``name`` a call changed: ``k: 64 of 2176 values (shape [1, 2, 17, 64]: axis 0 all 1,
    ...), first k[0, 0, 16, 0]: 0.53125 -> 0.0``; or what changed about the tensor itself."""
    from attention_conformance.verdict.locate import change_text

    if now is None:
        return f"{name}: no longer handed back"
    if now.shape != old.shape or now.dtype != old.dtype:
        return f"{name}: {list(old.shape)} {old.dtype} became {list(now.shape)} {now.dtype}"
    if old.dtype == torch.bool or old.element_size() not in _ELEMENT_BITS or old.dim() == 0:
        return f"{name}: changed"
    bits = getattr(torch, _ELEMENT_BITS[old.element_size()])
    diff = (now.detach().contiguous().view(bits) != old.detach().contiguous().view(bits)).cpu().numpy()
    return change_text(name, diff, lambda i: old[i].item(), lambda i: now[i].item())


def changed(before: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor | None]) -> Mutated:
    """Names whose tensor differs bitwise from its snapshot, or whose shape or dtype changed, each with where
    (`Mutated.where`)."""
    names, where = [], {}
    for name, old in before.items():
        now = tensors.get(name)
        if now is None or now.shape != old.shape or now.dtype != old.dtype or not torch.equal(_bits(now), _bits(old)):
            names.append(name)
            where[name] = tensor_change(name, old, now)
    return Mutated(names, where)


# -- masks -------------------------------------------------------------------------------------------
def visibility(case: Case, mask: np.ndarray | None = None, *, include_causal: bool = True,
               B: int | None = None, Lq: int | None = None, Lk: int | None = None,
               padded_rows_visible: bool = False) -> np.ndarray | None:
    """bool [B, Hm, Lq, Lk], True where key j takes part for query i; None when every key does.

    The structural part (SEMANTICS.md §4 causal alignment with each sequence's real lengths, §5 window
    (left, right) around the aligned diagonal, causal => right = 0, §7 keys at or past seqlens_k[b], §19
    chunks) is
    `oracles.visibility`; the case's boolean mask (§6, True = attend) is and-ed on top. Hm is Hq when
    `mask` varies over heads, else 1. Padded query rows (i >= seqlens_q[b]) are all False, fully masked
    rows (SEMANTICS.md §7, §8, §17: padding reaches a dense-mask API as masked-out positions; the engine
    does not compare those rows); `padded_rows_visible=True` makes them all True instead (for callers that
    ask which *real* rows are empty). `include_causal=False` leaves causal out (the caller passes it natively).
    """
    from attention_conformance import oracles

    B = case.B if B is None else B
    Lq = case.Lq if Lq is None else Lq
    Lk = case.Lk if Lk is None else Lk
    causal = case.causal and include_causal
    structural = causal or case.window is not None or case.varlen or case.chunk is not None
    if not structural and mask is None:
        return None
    vis = np.ones((B, 1, Lq, Lk), dtype=bool)
    if structural:
        seqlens_q = case.seqlens_q if case.varlen or case.seqlens_q is not None else None
        seqlens_k = case.seqlens_k
        if case.varlen:  # the oracle wants both or infers B from the one given
            seqlens_q = seqlens_q if seqlens_q is not None else (Lq,) * B
            seqlens_k = seqlens_k if seqlens_k is not None else (Lk,) * B
        window = case.window
        if not causal and case.causal:  # causal passed natively: only the window's own bounds here
            window = None if window is None else (window[0], 0 if window[1] is None else min(window[1], 0))
        vis = np.broadcast_to(
            oracles.visibility(Lq, Lk, causal=causal, alignment=case.alignment, window=window,
                               seqlens_q=seqlens_q, seqlens_k=seqlens_k, chunk=case.chunk),
            (B, 1, Lq, Lk),
        )
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        while m.ndim < 4:
            m = m[None]
        vis = vis & np.broadcast_to(m, (B, m.shape[1], Lq, Lk))
    vis = np.array(vis, dtype=bool)
    if case.seqlens_q is not None:
        for b, sq in enumerate(case.seqlens_q):
            vis[b, :, int(sq):, :] = padded_rows_visible
    return vis


def neutral_padded_bias(bias: np.ndarray | None, case: Case) -> np.ndarray | None:
    """`bias` broadcast to [B, Hb, Lq, Lk] with padded query rows (i >= seqlens_q[b]) set to 0.

    Their values are ignored (SEMANTICS.md §7); a finite bias there keeps an API that evaluates the bias
    on every row (FlexAttention's score_mod) from meeting -inf rows it was not asked about.
    """
    if bias is None or case.seqlens_q is None:
        return bias
    b = np.asarray(bias, dtype=np.float64)
    while b.ndim < 4:
        b = b[None]
    b = np.array(np.broadcast_to(b, (case.B, b.shape[1], case.Lq, case.Lk)))
    for i, n in enumerate(case.seqlens_q):
        b[i, :, int(n):, :] = 0.0
    return b


def fully_masked_rows(vis: np.ndarray | None, shape: tuple[int, int, int]) -> np.ndarray:
    """bool [B, Hq, Lq]: rows with no visible key (SEMANTICS.md §8), from a `visibility` array."""
    if vis is None:
        return np.zeros(shape, dtype=bool)
    return np.broadcast_to(~vis.any(axis=-1), shape)


def translate_empty_lse(lse: np.ndarray, empty: np.ndarray, declared: str) -> tuple[np.ndarray, str, str | None]:
    """Bring a vendor's LSE on fully masked rows (SEMANTICS.md §8) to what the engine judges.

    `empty` is bool, broadcastable to lse.shape: the rows with no visible key. -inf is the contract;
    +inf (the FA2 kernels' convention) is left as is: the engine accepts it and reports it by name.
    The adapter's `declared` finite convention (e.g. "0", the torch CPU flash op) is mapped to -inf,
    and only where every empty row that is not NaN holds exactly that value; a note records the mapping. NaN is
    left as it is, for the engine to grade as NaN anywhere (NaN the case planted in padding can reach a keyless row,
    SEMANTICS.md §17: with one NaN padded row beside them, the rows of the declared value had gone untranslated and
    failed). Anything else is returned unchanged, with a note, for the engine to fail. Returns (lse, convention
    seen, note).
    """
    empty = np.broadcast_to(empty, lse.shape)
    seen = lse[empty]
    seen = seen[~np.isnan(seen)]
    if seen.size == 0:
        return lse, declared, None
    if np.all(np.isneginf(seen)):
        return lse, "-inf", None
    if np.all(np.isposinf(seen)):
        return lse, "+inf", None
    if declared not in ("-inf", "+inf"):
        want = float(declared)
        if np.all(seen == want):
            out = lse.copy()
            mapped = empty & (lse == want)
            out[mapped] = -math.inf
            return out, declared, (f"LSE = {declared} on {int(mapped.sum())} fully masked row(s) (the kernel's "
                                   f"convention), mapped to -inf (SEMANTICS.md §8)")
    sample = sorted({repr(float(x)) for x in seen[:16]})
    return lse, "inconsistent", (f"LSE on {int(empty.sum())} fully masked row(s) is neither -inf nor the declared "
                                 f"convention {declared!r}: values {sample[:6]}; left untranslated")


def empty_rows(attn_mask: np.ndarray | None, shape: tuple[int, int, int]) -> np.ndarray:
    """bool [B, Hq, Lq]: rows where a bool mask has no True or an additive mask is -inf everywhere."""
    if attn_mask is None:
        return np.zeros(shape, dtype=bool)
    if attn_mask.dtype == bool:
        rows = ~attn_mask.any(axis=-1)
    else:
        rows = np.isneginf(attn_mask).all(axis=-1)
    return np.broadcast_to(rows, shape)


def float_mask(vis: np.ndarray | None, bias: np.ndarray | None, B: int, Lq: int, Lk: int) -> np.ndarray | None:
    """FP64 additive mask: the bias (SEMANTICS.md §6, added after softcap) where visible, -inf elsewhere."""
    if bias is None and vis is None:
        return None
    b = np.zeros((1, 1, 1, 1)) if bias is None else np.asarray(bias, dtype=np.float64)
    while b.ndim < 4:
        b = b[None]
    if vis is None:
        return np.ascontiguousarray(np.broadcast_to(b, (B, b.shape[1], Lq, Lk)))
    H = max(b.shape[1], vis.shape[1])
    shape = (B, H, Lq, Lk)
    return np.where(np.broadcast_to(vis, shape), np.broadcast_to(b, shape), -math.inf)


# -- which kernels ran -------------------------------------------------------------------------------
class KernelRecorder:
    """Context manager recording the CUDA kernels launched inside it (torch.profiler, CUDA activity).

    ``names`` lists each kernel name once, in launch order. On CPU (or when the profiler fails) it
    records nothing; ``error`` then says why, and adapters add it to their notes instead of claiming
    a kernel.
    """

    def __init__(self, device: str):
        self.device = device
        self.names: tuple[str, ...] = ()
        self.error: str | None = None
        self._prof = None

    @property
    def active(self) -> bool:
        return self.device.startswith("cuda")

    def __enter__(self) -> KernelRecorder:
        if not self.active:
            return self
        try:
            from torch.profiler import ProfilerActivity, profile

            torch.cuda.synchronize()
            self._prof = profile(activities=[ProfilerActivity.CUDA])
            self._prof.__enter__()
        except Exception as exc:  # profiler unavailable (e.g. CUPTI missing): run unprofiled
            self.error = f"profiler unavailable: {type(exc).__name__}: {exc}"
            self._prof = None
        return self

    def __exit__(self, *exc_info) -> None:
        if self._prof is None:
            return
        try:
            torch.cuda.synchronize()
        finally:
            self._prof.__exit__(*exc_info)
        if exc_info[0] is not None:
            return
        try:
            self.names = _cuda_kernel_names(self._prof)
        except Exception as exc:
            self.error = f"could not read the profiler's kernel events: {type(exc).__name__}: {exc}"


def _cuda_kernel_names(prof) -> tuple[str, ...]:
    from torch.autograd import DeviceType

    seen: dict[str, None] = {}
    for evt in prof.events():
        if getattr(evt, "device_type", None) == DeviceType.CUDA:
            seen.setdefault(evt.name, None)
    return tuple(seen)


def missing_kernel_note(names: Iterable[str], expected: Sequence[str], what: str) -> str | None:
    """A note when kernel names were captured but none contains any of `expected` substrings."""
    names = tuple(names)
    if not names:
        return None
    if any(any(e in n for e in expected) for n in names):
        return None
    return (f"{what}: none of the captured CUDA kernels matches {list(expected)}; ran: {list(names)[:8]}"
            + (" ..." if len(names) > 8 else ""))
