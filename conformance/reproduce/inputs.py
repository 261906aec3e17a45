"""The inputs of a standalone repro file: `conformance.cases.inputs.make_inputs` written out in plain NumPy.

`inputs_source(case)` is the ``make_inputs()`` function of the file: the same random streams, in the same order,
as conformance/cases/inputs.py draws them (NumPy PCG64 seeded by ``case.seed``: q, k, v by the case's distribution,
dout, the mask and bias recipes; paged storage, sinks and the LSE cotangent from streams of their own), rounded by the
file's ``round_to`` (conformance/reproduce/source.py), only the lines the case needs. `harness_arrays` names the
harness's own arrays the same way, so that `conformance.reproduce.source.input_digest` of both agree: the file checks
that digest before it calls the library. `UnwritableCase` says which part of a case has no written form.
"""

from __future__ import annotations

import math

import numpy as np

from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import Case, page_size_of
from attention_conformance.cases.inputs import WORKED, effective_scale, outlier_channels

__all__ = ["UnwritableCase", "harness_arrays", "inputs_helpers", "inputs_source"]


class UnwritableCase(ValueError):
    """A case the standalone writer cannot write out (the message says which part of it)."""


def harness_arrays(inputs: CaseInputs) -> dict[str, np.ndarray]:
    """The arrays of the harness's `CaseInputs` by the names a standalone file's ``make_inputs()`` returns."""
    out = {"q": inputs.q, "k": inputs.k, "v": inputs.v}
    for name in ("dout", "mask", "bias", "sinks", "dlse"):
        if getattr(inputs, name) is not None:
            out[name] = getattr(inputs, name)
    if inputs.paged is not None:
        out.update({n: inputs.paged[n] for n in ("k_pool", "v_pool", "block_table")})
    if inputs.fp8 is not None:
        out.update({n: inputs.fp8[n] for n in ("q8", "k8", "v8", "q_descale", "k_descale", "v_descale")})
    return out


def inputs_helpers(case: Case) -> list[str]:
    """Names of the `conformance.reproduce.source` functions ``make_inputs()`` calls for `case`."""
    names = ["round_to"]
    if page_size_of(case.layout) is not None:
        names += ["_page_permutation", "paged_storage"]
    if case.fp8 is not None:
        names.append("quantize_per_tensor")
    return names


def _check(case: Case) -> None:
    if case.kv_append is not None:
        raise UnwritableCase("KV-cache append cases (SEMANTICS.md §20) are not written standalone")
    if case.fp8 is not None and (case.fp8.granularity != "per_tensor" or case.fp8.incoherent):
        raise UnwritableCase(f"FP8 {case.fp8.granularity} scaling"
                             + (" with incoherent processing" if case.fp8.incoherent else "")
                             + " is not written standalone (per-tensor scales only)")
    if case.distribution.startswith("worked:") and case.distribution.split(":", 1)[1] not in WORKED:
        raise UnwritableCase(f"unknown worked example {case.distribution!r}")


def _literal(a: np.ndarray) -> str:
    return f"np.array({np.asarray(a, dtype=np.float64).reshape(-1).tolist()!r}).reshape({tuple(a.shape)!r})"


def _qkv_lines(case: Case) -> list[str]:
    qs = (case.B, case.Hq, case.Lq, case.d)
    kvb = 1 if case.layout == "kv_broadcast" else case.B
    ks = (kvb, case.Hkv, case.Lk, case.d)
    vs = (kvb, case.Hkv, case.Lk, case.dv)
    dist = case.distribution
    if dist.startswith("worked:"):
        arrays = WORKED[dist.split(":", 1)[1]]()
        lines = [f"# the worked example {dist.split(':', 1)[1]!r} of the harness's seed documents"]
        lines += [f"{n} = {_literal(arrays[n])}" for n in ("q", "k", "v")]
        if "dout" in arrays:
            lines.append(f"dout = {_literal(arrays['dout'])}")
        return lines
    if dist in ("normal", "nan_padding"):
        return [f"q = rng.standard_normal({qs})", f"k = rng.standard_normal({ks})", f"v = rng.standard_normal({vs})"]
    if dist == "outliers":
        lines = ["# N(0, 1) plus, on 0.1% of the entries, an extra N(0, 10^2)"]
        for n, shape in (("q", qs), ("k", ks), ("v", vs)):
            lines += [f"{n} = rng.standard_normal({shape})",
                      f"{n} = {n} + (rng.random({shape}) < 1e-3) * rng.normal(0.0, 10.0, {shape})"]
        return lines
    if dist == "large_logits":
        c = math.sqrt(1600.0 / abs(effective_scale(case)) / math.sqrt(case.d))
        return [f"c = {c!r}  # |scale| * c^2 * sqrt(d) = 1600: scores reach ~1e4",
                f"q = c * rng.standard_normal({qs})", f"k = c * rng.standard_normal({ks})",
                f"v = rng.standard_normal({vs})"]
    if dist == "ties":
        return [f"q = rng.standard_normal({qs})", "q[:, :, ::4, :] = 0.0  # every fourth query row is zero",
                f"distinct = rng.standard_normal({(kvb, case.Hkv, 2, case.d)})",
                f"k = distinct[:, :, np.arange({case.Lk}) % 2, :]  # two distinct key rows, alternating",
                f"v = rng.standard_normal({vs})"]
    if dist == "tiny_lse":
        sc = effective_scale(case)
        c = math.sqrt(200.0 / max(abs(sc), 1e-30) / case.d)
        sign = 1.0 if sc >= 0 else -1.0
        return [f"c = {c!r}  # every score about -200: LSE far below -88.7",
                f"q = c + 0.25 * rng.standard_normal({qs})", f"k = {-sign!r} * c + 0.25 * rng.standard_normal({ks})",
                f"v = rng.standard_normal({vs})"]
    if dist == "activations":
        ch = outlier_channels(case.d)
        unit = 1.0 / (effective_scale(case) * 8.0 * math.sqrt(2.0 / math.pi) * len(ch))
        return [f"q = rng.standard_normal({qs})", f"k = rng.standard_normal({ks})", f"v = rng.standard_normal({vs})",
                f"ch = {ch!r}  # outlier channels ('massive activations')",
                f"unit = {unit!r}  # a key holding this in each outlier channel adds about one to every logit",
                "q[..., ch] = 8.0 * np.abs(q[..., ch])", "k[..., ch] = 2.0 * k[..., ch]",
                "k[:, :, 0, ch] = 10.0 * unit  # key 0: an attention sink at about +10",
                "k[:, :, -1, ch] = 13.0 * unit  # the last key: an attractor at about +13",
                "v[:, :, 0, :] = 0.05 * v[:, :, 0, :]  # the sink carries little value"]
    if dist == "uniform":
        return ["r3 = math.sqrt(3.0)", f"q = rng.uniform(-r3, r3, {qs})", f"k = rng.uniform(-r3, r3, {ks})",
                f"v = rng.uniform(0.0, 1.0, {vs})"]
    raise UnwritableCase(f"distribution {dist!r} has no written form")


def _mask_lines(case: Case) -> list[str]:
    B, Hq, Lq, Lk = case.B, case.Hq, case.Lq, case.Lk
    name = case.mask
    if name in ("random", "random_heads", "full_rows"):
        shape = (B, Hq if name == "random_heads" else 1, Lq, Lk)
        lines = [f"mask = rng.random({shape}) >= 0.3  # True = attend; about 30% masked"]
        if Lk > 0:
            lines += [f"first = rng.integers(0, {Lk}, size={shape[:-1]})  # one visible key per row at least",
                      "np.put_along_axis(mask, first[..., None], True, axis=-1)"]
        if name == "full_rows":
            rows = sorted({0, Lq // 2, Lq - 1})
            lines.append(f"mask[:, :, {rows}, :] = False  # fully masked rows (SEMANTICS.md §8)")
        return lines
    if name == "key_padding":
        return [f"mask = np.ones({(B, 1, 1, Lk)}, dtype=bool)", f"mask[1::2, :, :, {Lk - Lk // 3}:] = False"]
    if name == "none_visible":
        return [f"mask = np.zeros({(B, 1, Lq, Lk)}, dtype=bool)  # no query sees any key (SEMANTICS.md §8)"]
    raise UnwritableCase(f"mask recipe {name!r} has no written form")


def _bias_lines(case: Case) -> list[str]:
    B, Hq, Lq, Lk = case.B, case.Hq, case.Lq, case.Lk
    dtype = "bfloat16" if case.fp8 is not None else case.dtype
    if case.bias == "random":
        lines = [f"bias = rng.standard_normal({(B, Hq, Lq, Lk)})"]
    elif case.bias == "alibi":
        lines = [f"slopes = 2.0 ** (-8.0 * (np.arange({Hq}) + 1) / {Hq})",
                 f"i = np.arange({Lq})[:, None] + {Lk - Lq}",
                 f"bias = -slopes[None, :, None, None] * np.abs(i - np.arange({Lk})[None, :])[None, None]"]
    elif case.bias == "neg_inf_rows":
        rows = sorted({min(1, Lq - 1), max(Lq - 2, 0)})
        lines = [f"bias = rng.standard_normal({(B, Hq, Lq, Lk)})", f"bias[:, :, {rows}, :] = -np.inf"]
    else:
        raise UnwritableCase(f"bias recipe {case.bias!r} has no written form")
    return lines + ["finite = np.isfinite(bias)",
                    f"bias = np.where(finite, round_to(np.where(finite, bias, 0.0), \"{dtype}\"), bias)"]


def _padding_lines(case: Case) -> list[str]:
    """NaN in every padded row (the ``nan_padding`` recipe, SEMANTICS.md §7): a kernel must not read them."""
    if case.fp8 is not None or not case.varlen:
        return []
    lines = ["# padded rows hold NaN (SEMANTICS.md §7: never read)"]
    if case.seqlens_q is not None:
        lines += [f"for b, n in enumerate({list(case.seqlens_q)}):", "    q[b, :, n:, :] = np.nan"]
        if case.backward:
            lines.append("    dout[b, :, n:, :] = np.nan")
    if case.seqlens_k is not None:
        lens = list(case.seqlens_k)
        if case.layout == "kv_broadcast":  # K/V shared by the batch: only keys padded in every sequence
            lens = [max(lens)] * case.B
        lines += [f"for b, n in enumerate({lens}):", "    k[b, :, n:, :] = np.nan", "    v[b, :, n:, :] = np.nan"]
    return lines


def inputs_source(case: Case) -> str:
    """The ``make_inputs()`` function of `case`'s standalone repro (module docstring); `UnwritableCase` if none."""
    _check(case)
    dtype = case.dtype
    worked = case.distribution.startswith("worked:")
    worked_dout = worked and "dout" in WORKED[case.distribution.split(":", 1)[1]]()
    has_dout = case.backward or worked_dout  # a worked example brings its own dout, even to a forward case
    draws = not worked or (case.backward and not worked_dout) or case.mask is not None or case.bias is not None
    body = [f"rng = np.random.default_rng({case.seed})"] if draws else []
    body += _qkv_lines(case)
    if case.layout == "kv_broadcast" and case.B != 1:
        body += ["# one K/V for the whole batch (layout kv_broadcast)",
                 f"k = np.broadcast_to(k, {(case.B, case.Hkv, case.Lk, case.d)})",
                 f"v = np.broadcast_to(v, {(case.B, case.Hkv, case.Lk, case.dv)})"]
    if case.backward and not worked_dout:
        body.append(f"dout = rng.standard_normal({(case.B, case.Hq, case.Lq, case.dv)})")
    if case.mask is not None:
        body += _mask_lines(case)
    if case.bias is not None:
        body += _bias_lines(case)
    names = ["q", "k", "v"]
    if case.fp8 is not None:
        fmt = case.fp8.format
        body += ["# FP8 (SEMANTICS.md §10): float32 values quantized with one scale per tensor; q, k, v dequantized",
                 'q, k, v = (round_to(x, "float32") for x in (q, k, v))',
                 f'(q8, q_descale), (k8, k_descale), (v8, v_descale) = (quantize_per_tensor(x, "{fmt}") '
                 "for x in (q, k, v))",
                 "q, k, v = q8 * q_descale, k8 * k_descale, v8 * v_descale"]
        names += ["q8", "k8", "v8", "q_descale", "k_descale", "v_descale"]
        if has_dout:
            body.append('dout = round_to(dout, "bfloat16")')
    else:
        body.append(f"q, k, v = (round_to(x, \"{dtype}\") for x in (q, k, v))  # exact in {dtype} (SEMANTICS.md §1)")
        if has_dout:
            body.append(f"dout = round_to(dout, \"{dtype}\")")
    if has_dout:
        names.append("dout")
    if case.distribution == "nan_padding":
        body += _padding_lines(case)
    names += [n for n in ("mask", "bias") if getattr(case, n) is not None]
    page_size = page_size_of(case.layout)
    if page_size is not None:
        body.append(f"pages = paged_storage({case.seed}, {page_size}, k, v, "
                    f"{None if case.seqlens_k is None else list(case.seqlens_k)})  # SEMANTICS.md §16")
    if case.sinks is not None:
        body += [f"# one sink logit per query head (SEMANTICS.md §18), recipe {case.sinks!r}, from a stream of its own",
                 f"rng = np.random.default_rng([{case.seed}, 0x5157])"]
        if case.sinks == "small":
            body.append(f"sinks = rng.standard_normal({case.Hq})")
        elif case.sinks == "large":
            body += [f"sinks = rng.uniform(8.0, 40.0, {case.Hq})", "sinks[:1] = 1e4"]
        else:
            body += [f"sinks = rng.uniform(-90.0, -60.0, {case.Hq})", "sinks[:1] = -1e4"]
        body.append(f'sinks = round_to(sinks, "{"bfloat16" if case.fp8 is not None else dtype}")')
        names.append("sinks")
    if case.backward and case.lse_grad:
        body += ["# the LSE cotangent (the LSE is an output with a gradient, SEMANTICS.md §13)",
                 f"dlse = round_to(np.random.default_rng([{case.seed}, 0xD15E]).standard_normal("
                 f'{(case.B, case.Hq, case.Lq)}), "{dtype}")']
        names.append("dlse")
    ret = "{" + ", ".join(f'"{n}": {n}' for n in names) + "}"
    if len(ret) > 100:
        ret = "{\n" + "".join(f'        "{n}": {n},\n' for n in names) + "    }"
    if page_size is not None:
        ret += " | pages"
    body.append(f"return {ret}")
    doc = ('"""The inputs of the case, as attention-conformance makes them (conformance/cases/inputs.py) from seed '
           f'{case.seed}:\n    float64 arrays whose values are exact in {dtype if case.fp8 is None else "FP8"}. '
           'The digest check in main() proves they are the harness\'s."""')
    return "def make_inputs():\n    " + doc + "\n" + "".join(f"    {line}\n" for line in body)
