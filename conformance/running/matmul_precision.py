"""What this process's torch lets a float32 matrix product round to: the settings a user's code may have changed.

torch's float32 matmuls follow process-wide switches: ``torch.set_float32_matmul_precision("high" | "medium")``,
``torch.backends.cuda.matmul.allow_tf32 = True``, and since torch 2.9 ``torch.backends.fp32_precision`` /
``torch.backends.cuda.matmul.fp32_precision = "tf32"``. Any of them lets cuBLAS, Inductor's Triton kernels (compiled
FlexAttention) and oneDNN round float32 operands to TF32 (10 mantissa bits) or bfloat16, so a float32 case computed
through them is ~2^-11 accurate instead of ~2^-24, and FAILs its float32 bound (conformance/TOLERANCES.md: the
score GEMM of a float32 case accumulates exact float32 operands, u_s = 2^-24). A training code base often sets one
of them at import, so a ``--impl mypkg.attn:fn`` brings it into the process that calls the function.

`reduced_float32_matmul` names the switch in force, or None; `call_adapter` (conformance/running/worker.py) notes it
on every float32 call made with one on, so the FAIL says why; `settings` is what the report's environment records.
No verdict changes: the call is judged on what it computed.
"""

from __future__ import annotations

import sys
import warnings

__all__ = ["reduced_float32_matmul", "settings"]


def settings() -> dict[str, object]:
    """The float32-matmul switches of this process's torch (empty when torch is not imported)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    out: dict[str, object] = {}
    with warnings.catch_warnings():  # the older switches warn of their successors in some releases
        warnings.simplefilter("ignore")
        for key, read in (
            ("float32_matmul_precision", lambda: torch.get_float32_matmul_precision()),
            ("backends.fp32_precision", lambda: torch.backends.fp32_precision),
            ("backends.cuda.matmul.fp32_precision", lambda: torch.backends.cuda.matmul.fp32_precision),
            ("backends.cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
        ):
            try:
                out[key] = read()
            except (AttributeError, RuntimeError):
                continue
    return out


def reduced_float32_matmul() -> str | None:
    """A sentence naming the switch that lets float32 matmuls round below float32 in this process, or None."""
    s = settings()
    on = []
    if s.get("float32_matmul_precision") not in (None, "highest"):
        on.append(f"torch.get_float32_matmul_precision() == {s['float32_matmul_precision']!r}")
    for key in ("backends.fp32_precision", "backends.cuda.matmul.fp32_precision"):
        if s.get(key) == "tf32":
            on.append(f"torch.{key} == 'tf32'")
    if s.get("backends.cuda.matmul.allow_tf32") is True:
        on.append("torch.backends.cuda.matmul.allow_tf32 is True")
    if not on:
        return None
    return ("this call ran with float32 matmuls allowed to round below float32 (" + "; ".join(on) + "): TF32 or "
            "bfloat16 products are ~2^-11 accurate where the float32 bound assumes ~2^-24 (a setting of the process, "
            "often made at import by the code under test)")
