"""The xformers call of a standalone repro file (``repro --standalone --impl xformers[@ENTRY]``).

The plan writes out what `conformance.adapters.xformers` does for the case, from the adapter's own decisions: the
``attn_bias`` spelling and the equivalent form of the case it picks (asked of xformers where the library runs here,
``Xformers._pick``; from the declarations otherwise, ``Xformers._claim``, and xformers answers when the file runs),
the bias object or dense tensor bias (`BIASES`, `window_size`), BMHK views of the case's tensors (BMGHK with K / V
expanded over each group for GQA), sequences packed along one batch row for the block-diagonal biases, ``op=`` of an
operator spelling, the key splits of ``partial`` (`kv_splits`) merged by ``merge_attentions``, and the backward
through autograd. A call the dispatcher or the operator declines (``NotImplementedError``) exits 2, as the adapter
reports it NOT_SUPPORTED.
"""

from __future__ import annotations

from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import Case
from attention_conformance.reproduce.calls import (
    CallPlan,
    _claim,
    _dout_lines,
    _function,
    _preflight,
    _tensor_lines,
    _to_numpy_lines,
    _versions,
    distribution_version,
)

__all__ = ["xformers_plan"]

_DTYPE = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16"}


def _bias_lines(xf, name: str, form: Case, sq: list[int], sk: list[int]) -> tuple[list[str], list[str]]:
    """(helpers, lines making ``attn_bias``) for spelling `name` (`conformance.adapters.xformers._bias_object` and
    `_dense_bias`)."""
    sp = xf.BIASES[name]
    if sp.cls is None:
        return [], ["attn_bias = None"]
    if sp.dense:
        head = f'vis = dense_visibility({form.B}, {form.Lq}, {form.Lk}, {sq}, {sk}, inp.get("mask"), '
        bias = 'inp["bias"]' if form.bias is not None else "0.0"
        return ["visible", "dense_visibility"], [
            head + f"causal={form.causal!r},",
            " " * len("vis = dense_visibility(") + f'alignment="{form.alignment}", window={form.window!r}, '
            f"chunk={form.chunk!r})",
            f"full = np.broadcast_to(np.where(vis, {bias}, -np.inf), ({form.B}, {form.Hq}, {form.Lq}, {form.Lk}))"
            "  # the bias where visible",
            "# xformers wants the last dimension of a tensor bias 8-aligned: a slice of a wider buffer",
            f"storage = torch.empty({form.B}, {form.Hq}, {form.Lq}, {8 * -(-max(form.Lk, 1) // 8)}, dtype=q.dtype, "
            "device=DEVICE)",
            f"attn_bias = storage[..., :{form.Lk}]",
            "attn_bias.copy_(torch.from_numpy(np.array(full)).to(q.dtype))"]
    ab = "fmha.attn_bias"
    if not sp.blocks:
        args = str(xf.window_size(form)) if sp.window else ""
        return [], [f"attn_bias = {ab}.{sp.cls}({args})"]
    lens = [f"SQ = {sq}  # each sequence's query length", f"SK = {sk}  # each sequence's key length"]
    if sp.padded_keys:
        return [], lens + [f"attn_bias = {ab}.{sp.cls}.from_seqlens(",
                           f"    q_seqlen=SQ, kv_padding={form.Lk}, kv_seqlen=SK, device=DEVICE)"]
    if sp.window:
        return [], lens + [f"attn_bias = {ab}.BlockDiagonalMask.from_seqlens(SQ, SK, device=DEVICE)"
                           f".make_local_attention({xf.window_size(form)})"]
    return [], lens + [f"attn_bias = {ab}.{sp.cls}.from_seqlens(SQ, SK, device=DEVICE)"]


def xformers_plan(adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    """The `CallPlan` of `case` through the xformers adapter `adapter` (module docstring)."""
    from attention_conformance.adapters import xformers as xf
    from attention_conformance.adapters.spelling import kv_splits, sequence_lengths

    checked = _claim(adapter, spec, case, device)
    if adapter.unavailable_reason(device) is None:  # xformers runs here: its own answer picks the bias
        name, form, _ = adapter._pick(case, device)
    else:
        name, form, _ = adapter._claim(case)
    if name is None:
        raise ValueError(f"{adapter.name} claims no spelling of case {case.id}")
    sp = xf.BIASES[name]
    sq, sk = (list(x) for x in sequence_lengths(form))
    B, Hq, Hkv, Lq = form.B, form.Hq, form.Hkv, form.Lq
    g = Hq // Hkv
    dtype = _DTYPE[form.dtype]
    grad = "requires_grad"
    body = _tensor_lines(form, dtype, ("q", "k", "v"), None, grad)
    body += ["qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # BMHK views"]
    if sp.blocks:
        body += [f"# the sequences packed along one batch row: queries {sq}"]
        body += [f"qb = torch.cat([qb[b: b + 1, :n] for b, n in enumerate({sq})], dim=1)"]
        if sp.padded_keys:
            body += [f"# keys left in per-sequence slots of {form.Lk} (kv_padding), their lengths {sk} told",
                     f"kb, vb = kb.reshape(1, {B * form.Lk}, {Hkv}, -1), vb.reshape(1, {B * form.Lk}, {Hkv}, -1)"]
        else:
            body += [f"kb = torch.cat([kb[b: b + 1, :n] for b, n in enumerate({sk})], dim=1)",
                     f"vb = torch.cat([vb[b: b + 1, :n] for b, n in enumerate({sk})], dim=1)"]
    helpers, bias_lines = _bias_lines(xf, name, form, sq, sk)
    if adapter.entry_point != "partial":  # partial takes no bias (no_bias only)
        body += bias_lines
    if g > 1:
        body += [f"# GQA as BMGHK: {Hkv} groups of {g} query heads, K / V expanded over each group (stride 0)",
                 f"qb = qb.unflatten(2, ({Hkv}, {g}))",
                 f"kb = kb.unsqueeze(3).expand(*kb.shape[:3], {g}, kb.shape[-1])",
                 f"vb = vb.unsqueeze(3).expand(*vb.shape[:3], {g}, vb.shape[-1])"]
        if sp.dense:
            body += [f"attn_bias = attn_bias.unflatten(1, ({Hkv}, {g}))"]
    op = "None"
    if adapter.entry_point in xf.OPS:
        module = f"fmha.{adapter.entry_point}"
        op = f"({module}.FwOp, {module}.BwOp)" if xf.OPS[adapter.entry_point] else f"({module}.FwOp, None)"
    unpack = ["", "def unpack(o):", '    """xformers\' output (BMHK / BMGHK, packed or not) -> [B, Hq, Lq, dv]."""',
              "    o = o.flatten(2, 3) if o.dim() == 5 else o"]
    if sp.blocks:
        unpack += [f"    full = o.new_zeros({B}, {Lq}, {Hq}, o.shape[-1])", "    start = 0",
                   f"    for b, n in enumerate({sq}):", "        full[b, :n] = o[0, start: start + n]",
                   "        start += n", "    return full.transpose(1, 2)"]
    else:
        unpack += ["    return o.transpose(1, 2)"]
    body += unpack + [""]
    observed: tuple[str, ...] = ("out",)
    if adapter.entry_point == "partial":
        splits = kv_splits(form.Lk)
        body += [f"SPLITS = {splits!r}  # three uneven key splits (SEMANTICS.md §14)",
                 "parts = [fmha.memory_efficient_attention_partial(qb, kb[:, lo:hi], vb[:, lo:hi], "
                 f"scale={form.scale!r})",
                 "         for lo, hi in SPLITS]",
                 "out, lse = fmha.merge_attentions([p[0] for p in parts], [p[1] for p in parts], write_lse=True,",
                 "                                 output_dtype=qb.dtype)",
                 f"lse = lse.reshape({B}, {Hq}, -1)[:, :, :{Lq}]  # natural log, [B, (G,) H, M] -> [B, Hq, Lq]",
                 "return q, k, v, unpack(out), lse"]
        observed += ("lse",)
    else:
        body += ["try:",
                 f"    out = fmha.memory_efficient_attention(qb, kb, vb, attn_bias=attn_bias, scale={form.scale!r},",
                 f"                                          op={op})",
                 "except NotImplementedError as exc:  # the dispatcher or the operator declining: nothing computed",
                 "    raise LibraryDeclined(str(exc)) from None",
                 "return q, k, v, unpack(out), None"]
    run = ["import torch", "import xformers.ops.fmha as fmha", "", "def call(requires_grad):"]
    run += [f"    {x}" if x else "" for x in body]
    run += ["", "_, _, _, out, lse = call(False)", 'result = {"out": out}']
    if "lse" in observed:
        run += ['result["lse"] = lse']
    if form.backward:
        run += ["q, k, v, out, _ = call(True)  # the backward: autograd of sum(out * dout) through the same call"]
        run += _dout_lines(form, dtype)
        run += ["dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_outputs=dout)",
                "result.update(dq=dq, dk=dk, dv=dv)"]
        observed += ("dq", "dk", "dv")
    run += _to_numpy_lines()
    what = "memory_efficient_attention_partial + merge_attentions" if adapter.entry_point == "partial" else (
        f"memory_efficient_attention(attn_bias={sp.cls})" + (f", op={op}" if op != "None" else ""))
    library = f"xformers xformers.ops.fmha.{what}"
    return CallPlan(
        library=library, device="cuda", observed=observed, helpers=["as_tensor", *helpers], checked=checked,
        run_library=_function("run_library(inp)", f"The call under test: {library}"
                              + (", then its backward through autograd" if form.backward else "")
                              + ". Returns float64 arrays in [B, H, L, D] order.", run),
        cannot_run_here=_preflight("cuda", [("import xformers.ops.fmha", "xformers")],
                                   f"xformers' attention runs on CUDA ({adapter.cc_text})"),
        versions=_versions(distribution_version("xformers"), "cuda"))
