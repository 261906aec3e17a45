"""The FP64 oracle's values for one case: O, LSE and, for backward cases, dQ, dK, dV (and d sink).

`oracle_values(case, inputs)` turns a case and its inputs into the oracle's keyword arguments (the case's
`oracle_kwargs` with the inputs' mask, bias and sinks) and calls `oracles.attention` / `oracles.attention_backward`
(SEMANTICS.md §3, §12, §18); it also returns the oracle's validated problem (`oracles.validate.validate`), whose
fields the bound pass (`conformance.verdict.bounds`) walks block by block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attention_conformance.cases.case import Case

__all__ = ["oracle_values"]


def oracle_values(case: Case, inputs) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], Any]:
    """(O [B, Hq, Lq, dv], LSE [B, Hq, Lq], gradients by name ({} for a forward case), the validated problem)."""
    from attention_conformance import oracles
    from attention_conformance.oracles.validate import validate

    kw = dict(case.oracle_kwargs)
    kw.update(mask=inputs.mask, bias=inputs.bias)
    sinks = getattr(inputs, "sinks", None)
    if sinks is not None:
        kw["sinks"] = sinks
    out, lse = oracles.attention(inputs.q, inputs.k, inputs.v, **kw)
    grads: dict[str, np.ndarray] = {}
    dlse = getattr(inputs, "dlse", None) if case.backward else None
    if case.backward:
        g = oracles.attention_backward(inputs.q, inputs.k, inputs.v, inputs.dout, dlse=dlse, **kw)
        grads = {"dq": g[0], "dk": g[1], "dv": g[2]}
        if sinks is not None:
            grads["dsinks"] = g[3]
    p = validate(inputs.q, inputs.k, inputs.v, inputs.dout if case.backward else None, dlse=dlse, **kw)
    return out, lse, grads, p
