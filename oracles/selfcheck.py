"""A quick self-check of the FP64 oracle, for the CLI and CI (`python -m attention_conformance.oracles.selfcheck
[--json PATH]`).

Each check compares two independent routes to the same number and records the error and its bound:
dense vs streaming forward (§12), dense vs merged split-KV partials (§14), analytic backward vs
central differences (§13), the same three with sinks and chunks (§18, §19; d sink with an LSE cotangent),
the fully-masked-row-with-sink convention (§18), the seed lab (`oracles.lab`), and two worked numbers from the seeds
(online-softmax O ~ 4.966, split-K O ~ 1.612955). Returns / prints PASS or FAIL per check.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable

import numpy as np

from .backward import attention_backward
from .forward import attention
from .lab import run_lab
from .merge import merge_partials, split_partials
from .numgrad import central_differences, compare_gradients, numerical_gradients
from .streaming import streaming_attention

__all__ = ["CHECKS", "run_selfcheck", "main"]

_KW = {"causal": True, "window": (3, None), "softcap": 2.0, "seqlens_q": [5, 3], "seqlens_k": [6, 7]}
_SINKS = np.array([0.4, -1.5, 3.0, -30.0])
_KW_SINK = {"causal": True, "chunk": 3, "seqlens_q": [5, 3], "seqlens_k": [6, 0]}


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((2, 4, 5, 3)),
        rng.standard_normal((2, 2, 7, 3)),
        rng.standard_normal((2, 2, 7, 2)),
        rng.standard_normal((2, 4, 5, 2)),
    )


def _max_err(a, b) -> float:
    (oa, la), (ob, lb) = a, b
    if not np.array_equal(np.isneginf(la), np.isneginf(lb)):
        return math.inf
    fin = np.isfinite(la)
    return float(max(np.abs(oa - ob).max(initial=0.0), np.abs(la[fin] - lb[fin]).max(initial=0.0)))


def _streaming() -> float:
    q, k, v, _ = _inputs()
    dense = attention(q, k, v, **_KW)
    return max(_max_err(streaming_attention(q, k, v, block=b, **_KW), dense) for b in (1, 3, 8))


def _merge() -> float:
    q, k, v, _ = _inputs()
    dense = attention(q, k, v, **_KW)
    outs, lses = split_partials(q, k, v, [0, 2, 2, 5, 7], **_KW)
    return _max_err(merge_partials(outs[::-1], lses[::-1]), dense)


def _backward() -> float:
    q, k, v, dout = _inputs()
    analytic = attention_backward(q, k, v, dout, **_KW)
    numeric = numerical_gradients(lambda a, b, c: attention(a, b, c, **_KW)[0], q, k, v, dout)
    return max(err for err, _ in compare_gradients(analytic, numeric).values())


def _sinks_streaming_merge() -> float:
    q, k, v, _ = _inputs()
    dense = attention(q, k, v, sinks=_SINKS, **_KW_SINK)
    stream = max(_max_err(streaming_attention(q, k, v, block=b, sinks=_SINKS, **_KW_SINK), dense) for b in (1, 4))
    outs, lses = split_partials(q, k, v, [0, 3, 3, 7], **_KW_SINK)
    return max(stream, _max_err(merge_partials(outs, lses, sinks=_SINKS), dense))


def _sinks_backward() -> float:
    q, k, v, dout = _inputs()
    dlse = np.random.default_rng(1).standard_normal(dout.shape[:3])
    real = np.arange(5)[None, :] < np.array(_KW_SINK["seqlens_q"])[:, None]
    analytic = attention_backward(q, k, v, dout, sinks=_SINKS, dlse=dlse, **_KW_SINK)

    def f(a, b, c, s):
        out, lse = attention(a, b, c, sinks=s, **_KW_SINK)
        return out, np.where(np.isfinite(lse), lse, 0.0)

    cts = [dout * real[:, None, :, None], dlse * real[:, None]]
    numeric = central_differences(f, [q, k, v, _SINKS], cts, eps=1e-5)  # LSE terms: rounding dominates at 1e-6
    return max(float(np.abs(a - n).max()) for a, n in zip(analytic, numeric))


def _sink_empty_row() -> float:
    q, k, v, _ = _inputs()
    out, lse = attention(q, k[:, :, :0], v[:, :, :0], sinks=_SINKS)  # no key at all: O = 0, LSE = sink
    return float(max(np.abs(out).max(), np.abs(lse - _SINKS[None, :, None]).max()))


def _lab() -> float:
    r = run_lab(7, 3)
    return max(r["forward_err"] / 1e-12, max(r["grad_err"].values()) / 2e-8)  # worst error / its bound


def _seed_online_softmax() -> float:
    q = np.ones((1, 1, 1, 1))
    k = np.array([1.0, 2, 3, 0]).reshape(1, 1, 4, 1)
    v = np.array([2.0, 8, 4, 10]).reshape(1, 1, 4, 1)
    e = math.e
    exact = (2 * e + 8 * e**2 + 4 * e**3 + 10) / (e + e**2 + e**3 + 1)  # = 4.9656..., "O ~ 4.966"
    return abs(float(streaming_attention(q, k, v, block=2, scale=1.0)[0][0, 0, 0, 0]) - exact)


def _seed_split_k() -> float:
    q = np.ones((1, 1, 1, 1))
    k = np.array([1.0, 2, 4, 0]).reshape(1, 1, 4, 1)
    v = np.array([2.0, 5, 1, 9]).reshape(1, 1, 4, 1)
    outs, lses = split_partials(q, k, v, [0, 2, 4], scale=1.0)
    return abs(float(merge_partials(outs, lses)[0][0, 0, 0, 0]) - 1.612955)


# name -> (function returning an error, bound, what it compares)
CHECKS: dict[str, tuple[Callable[[], float], float, str]] = {
    "streaming_vs_dense": (_streaming, 1e-12, "row-streaming online softmax vs dense forward, blocks 1/3/8 (§12)"),
    "merge_vs_dense": (_merge, 1e-12, "merge of split-KV partials incl. an empty split vs dense (§14)"),
    "backward_vs_central_differences": (_backward, 2e-8, "analytic backward vs central differences (§13)"),
    "sinks_chunk_streaming_merge_vs_dense": (
        _sinks_streaming_merge, 1e-12, "sinks + chunk: streaming (sink in the running max) and merge (sink once) (§18)"
    ),
    "sinks_backward_vs_central_differences": (
        _sinks_backward, 2e-8, "dq, dk, dv, d sink with dout and dlse vs central differences (§13, §18)"
    ),
    "sink_fully_masked_row": (_sink_empty_row, 0.0, "no visible key with a sink: O = 0, LSE = sink exactly (§18)"),
    "seed_lab": (_lab, 1.0,
                 "python -m attention_conformance.oracles.lab --length 7 --block 3: worst error / its bound"),
    "seed_online_softmax_4.966": (_seed_online_softmax, 1e-14, "[FA-anim] online-softmax example, exact form"),
    "seed_split_k_1.612955": (_seed_split_k, 5e-7, "[FA2-ch] split-K example"),
}


def run_selfcheck() -> dict:
    """Run every check; returns ``{"passed": bool, "checks": {name: {error, bound, passed, what}}}``."""
    results = {}
    for name, (fn, bound, what) in CHECKS.items():
        err = fn()
        results[name] = {"error": err, "bound": bound, "passed": bool(err <= bound), "what": what}
    return {"passed": all(r["passed"] for r in results.values()), "checks": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.oracles.selfcheck",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the results as JSON to this path")
    a = ap.parse_args(argv)
    report = run_selfcheck()
    for name, r in report["checks"].items():
        print(f"{'PASS' if r['passed'] else 'FAIL'}  {name}: error {r['error']:.3e} <= {r['bound']:g}  ({r['what']})")
    print("PASS" if report["passed"] else "FAIL")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
