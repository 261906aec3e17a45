"""A device check's case and outputs, judged by `conformance.verdict.judge.judge` (the conformance engine's judge).

`device_case` states a device check's problem as a conformance `Case` (shape, dtype or FP8 spec, the semantics of
SEMANTICS.md §2-§11); `oracle` computes the FP64 oracle and the a-priori bounds of conformance/TOLERANCES.md for it
(`conformance.verdict.bounds.compute_oracle`, with the case's precision model); `judge_outputs` hands the launcher's
outputs to the judge as an adapter's call would reach it, so the verdict is the one the engine gives, with no
tolerance of the device check's own. `to_numpy` turns a launcher's torch output into the float64 array the judge
compares; `real_rows` marks the query rows that are not padding (SEMANTICS.md §7).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attention_conformance.adapters.base import Capabilities
from attention_conformance.cases.calldata import AdapterResults, BackwardOutput, CallResult, CaseInputs, ForwardOutput
from attention_conformance.cases.case import DTYPES, Case, FP8Spec
from attention_conformance.verdict.bounds import OracleData, compute_oracle
from attention_conformance.verdict.judge import Verdict, judge
from attention_conformance.verdict.outcomes import PASS, QUALITY_WARNING

__all__ = ["LAUNCHER_CAPABILITIES", "device_case", "dtype_name", "judge_outputs", "oracle", "passed", "real_rows",
           "rel_err", "to_numpy"]

#: what the judge reads of a launcher: it returns the LSE (natural log, [B, Hq, Lq], -inf on fully masked rows,
#: SEMANTICS.md §8, §12) and writes into a caller's output buffer (whose NaN poison must all be overwritten)
LAUNCHER_CAPABILITIES = Capabilities(dtypes=frozenset({"float16", "bfloat16"}), devices=frozenset({"cuda"}),
                                     lse=True, accepts_out=True)


def dtype_name(dtype: Any) -> str:
    """``"bfloat16"`` for ``torch.bfloat16`` or ``"bfloat16"``; raises ValueError naming an unknown dtype."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of the case dtypes {DTYPES}")
    return name


def device_case(*, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int, dtype: Any, scale: float | None = None,
                causal: bool = False, alignment: str = "bottom_right",
                window: tuple[int | None, int | None] | None = None, softcap: float | None = None,
                seqlens_q: Any = None, seqlens_k: Any = None, layout: str = "contiguous", backward: bool = False,
                fp8: FP8Spec | None = None, nan_padding: bool = False, seed: int = 0, family: str = "device",
                dv: int | None = None) -> Case:
    """The conformance `Case` of one device check (``dv`` None: dv = d; ``seqlens_*`` any sequence of ints or None;
    ``nan_padding``: the padded rows hold NaN, SEMANTICS.md §7, so the judge names them in a failure)."""
    def lens(x: Any) -> tuple[int, ...] | None:
        return None if x is None else tuple(int(n) for n in x)

    dt = "float8_" + fp8.format if fp8 is not None else dtype_name(dtype)
    return Case(family=family, B=B, Hq=Hq, Hkv=Hkv, Lq=Lq, Lk=Lk, d=d, dv=d if dv is None else dv, dtype=dt,
                scale=scale, causal=causal, alignment=alignment, window=None if window is None else tuple(window),
                softcap=softcap, seqlens_q=lens(seqlens_q), seqlens_k=lens(seqlens_k),
                distribution="nan_padding" if nan_padding else "normal", layout=layout, backward=backward, fp8=fp8,
                seed=seed)


def to_numpy(x: Any) -> np.ndarray:
    """A torch tensor (any device, any float dtype) or array as a float64 NumPy array, values unchanged."""
    if hasattr(x, "detach"):
        return x.detach().double().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def oracle(case: Case, inputs: CaseInputs) -> OracleData:
    """The FP64 oracle of ``case`` on ``inputs`` (the float64 values the launcher read; for FP8 cases the dequantized
    ones, with the codes in ``inputs.fp8``) and its a-priori bounds: what the engine computes once per case."""
    return compute_oracle(case, inputs)


def judge_outputs(case: Case, reference: OracleData, out: Any, lse: Any, *, out_dtype: str, grads: Any = None,
                  mutated: list[str] | tuple[str, ...] = (), unwritten: int = 0) -> Verdict:
    """The judge's verdict on a launcher's outputs for ``case`` against ``reference`` (`oracle`): ``out``
    [B, Hq, Lq, d] and ``lse`` [B, Hq, Lq] (torch or NumPy), ``grads`` (dq, dk, dv) for a backward case,
    ``mutated`` the inputs the call changed, ``unwritten`` the real output elements still holding the NaN poison."""
    fwd = ForwardOutput(out=to_numpy(out), lse=None if lse is None else to_numpy(lse), out_dtype=out_dtype,
                        unwritten=int(unwritten))
    results = AdapterResults(forward=CallResult(output=fwd, mutated=list(mutated)))
    if grads is not None:
        dq, dk, dv = (to_numpy(g) for g in grads)
        results.backward = CallResult(output=BackwardOutput(dq=dq, dk=dk, dv=dv))
    return judge(case, reference, results, device="cuda", capabilities=LAUNCHER_CAPABILITIES)


def real_rows(B: int, H: int, L: int, lens: Any = None) -> np.ndarray:
    """bool [B, H, L]: True on the query rows below each batch entry's real length (all rows without ``lens``)."""
    valid = np.ones((B, H, L), dtype=bool)
    for b, n in enumerate(lens if lens is not None else ()):
        valid[b, :, int(n):] = False
    return valid


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """||got - ref|| / ||ref|| (Frobenius; NaN when ``got`` holds NaN): a figure for the lab tables, not a test."""
    return float(np.linalg.norm(got - ref) / max(float(np.linalg.norm(ref)), 1e-30))


def passed(verdict: Verdict) -> bool:
    """True for PASS and QUALITY_WARNING (within the bound, SEMANTICS.md's contract met); anything else fails."""
    return verdict.outcome in (PASS, QUALITY_WARNING)
