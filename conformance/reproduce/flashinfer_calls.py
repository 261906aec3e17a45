"""The FlashInfer call of a standalone repro file (``repro --standalone --impl flashinfer[@ENTRY]``).

The plan writes out what `conformance.adapters.flashinfer` does for the case, from the adapter's own decisions rather
than a restatement of them: the spelling and the equivalent form of the case it picks (``FlashInfer._pick``), the
``window_left`` of that form (`native_window`), the key splits of a split-KV spelling (`kv_splits`), the page table of
the case's block table (`page_table`), a densely stored case paged in order (`DENSE_PAGE_SIZE` keys a page), the FP8
scales (Q's descale folded into ``sm_scale`` for prefill, ``q_scale`` for decode). The page tables, index pointers
and splits go into the file as literals; the pools, masks and tensors are made in it from the case's inputs.

FlashInfer returns the LSE in base 2 as ``[tokens, heads]``; the file converts it (x ln 2) into the contract's
``[B, Hq, Lq]`` natural-log LSE, rows of padded queries left at -inf (not compared).
"""

from __future__ import annotations

import numpy as np

from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import Case, page_size_of
from attention_conformance.reproduce.calls import (
    CallPlan,
    _claim,
    _function,
    _preflight,
    _tensor_lines,
    _versions,
    _wrapped,
    distribution_version,
)

__all__ = ["flashinfer_plan"]

_DTYPE = {"float16": "torch.float16", "bfloat16": "torch.bfloat16"}


def _ints(a) -> str:
    return repr([int(x) for x in np.asarray(a).reshape(-1)])


def _tensor(a, dtype: str = "torch.int32") -> str:
    return f"torch.tensor({_ints(a)}, dtype={dtype}, device=DEVICE)"


def _kv_view(sp, name: str, b: str, lo: str, hi: str) -> str:
    """Keys lo..hi-1 of sequence b in the spelling's layout (NHD [n, Hkv, d] or HND [Hkv, n, d]) as the adapter hands
    them: views for the strided single-request functions, contiguous copies otherwise (`_Call._kv`)."""
    rows = f"{name}[{b}, :, {lo}:{hi}]"
    rows = rows if sp.kv_layout == "HND" else rows + ".transpose(0, 1)"
    return rows if sp.strided else rows + ".contiguous()"


def flashinfer_plan(adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    """The `CallPlan` of `case` through the FlashInfer adapter `adapter` (module docstring)."""
    from attention_conformance.adapters import flashinfer as fi
    from attention_conformance.adapters.spelling import kv_splits, sequence_lengths

    checked = _claim(adapter, spec, case, device)
    entry, form, why = adapter._pick(case)
    if entry is None:  # _claim has declined it already; kept for the type checker
        raise ValueError(why)
    sp = fi.SPELLINGS[entry]
    sq, sk = (list(x) for x in sequence_lengths(form))
    B, Hq, Hkv, Lq, d, dv = form.B, form.Hq, form.Hkv, form.Lq, form.d, form.dv
    fp8 = form.fp8 is not None
    paged_case = page_size_of(form.layout) is not None
    layout = "contiguous" if paged_case else None
    helpers = ["as_tensor"]

    # -- tensors, keywords ------------------------------------------------------------------------
    if fp8:
        kv_dtype = f"torch.float8_{form.fp8.format}"
        body = ["# FP8: Q's codes in float16, K / V codes in FP8 (per-tensor descales below)"]
        body += _tensor_lines(form, "torch.float16", ("q",), layout, "False", suffix="8")
        body += _tensor_lines(form, kv_dtype, ("k", "v"), layout, "False", suffix="8")
    else:
        body = _tensor_lines(form, _DTYPE[form.dtype], ("q", "k", "v"), layout, "False")
    kw: dict[str, object] = {}
    if form.scale is not None:
        kw["sm_scale"] = float(form.scale)
    if sp.softcap and form.softcap:
        kw["logits_soft_cap"] = float(form.softcap)
    decode_scales: dict[str, float] = {}
    if fp8:
        codes = inputs.fp8_codes(form.fp8)
        dq, dk, dvs = (float(np.asarray(codes[n], dtype=np.float64).reshape(-1)[0])
                       for n in ("q_descale", "k_descale", "v_descale"))
        if sp.decode:
            decode_scales = {"q_scale": dq, "k_scale": dk, "v_scale": dvs}
        else:  # a 16-bit query has no q_scale in the prefill calls: its descale goes into sm_scale
            kw.update(sm_scale=kw.get("sm_scale", d ** -0.5) * dq, k_scale=dk, v_scale=dvs)
    if sp.kind != "sink":  # the sink wrapper takes the scale as an argument and no logits transform
        body += _wrapped("kw = dict(", [f"{k}={v!r}" for k, v in kw.items()], ")", 104) if kw else ["kw = {}"]
    if form.sinks is not None:
        body += ["# one sink logit per query head (SEMANTICS.md §18), float32",
                 'sink = torch.tensor(np.asarray(inp["sinks"], dtype=np.float32), device=DEVICE)']
    body += [f"SQ = {sq}  # each sequence's query length (SEMANTICS.md §7)"]
    if not paged_case:
        body += [f"SK = {sk}  # each sequence's key length"]
    body += [
             f"out = torch.zeros({B}, {Hq}, {Lq}, {dv}, dtype=q.dtype, device=DEVICE)",
             f"lse = np.full(({B}, {Hq}, {Lq}), -np.inf)  # natural log; padded rows are not compared",
             "LN2 = math.log(2.0)  # FlashInfer's LSE is base 2"]
    window = -1 if sp.masks == "custom" else fi.native_window(form)  # a custom mask carries the window
    flags = f"causal={form.causal!r}, window_left={window}"
    if sp.packed:
        body += ["workspace = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=DEVICE)"]
    if sp.packed and sp.kind != "paged_decode":
        body += ["q_packed = torch.cat([q[b, :, :n].transpose(0, 1) for b, n in enumerate(SQ)])  # [total_q, Hq, d]",
                 _tensor_line("qo_indptr", fi.indptr(sq)),
                 "",
                 "def unpack(o, lse2, rows):",
                 '    """o [total_q, Hq, dv], lse2 [total_q, Hq] (base 2) of the sequences `rows` -> out, lse."""',
                 "    start = 0",
                 "    for b in rows:",
                 "        n = SQ[b]",
                 "        out[b, :, :n] = o[start: start + n].transpose(0, 1)",
                 "        lse[b, :, :n] = lse2[start: start + n].double().cpu().numpy().T * LN2",
                 "        start += n",
                 ""]
    types = "q_data_type=q.dtype, kv_data_type=k.dtype"

    # -- the call of each kind ----------------------------------------------------------------------
    if sp.kind in ("single_prefill", "merge"):
        custom = sp.masks == "custom" and (sp.kind != "merge" or fi._needs_custom_mask(form))
        if custom:
            helpers += ["visible", "dense_visibility"]
            body += [f"vis = dense_visibility({B}, {Lq}, {form.Lk}, SQ, SK, inp.get(\"mask\"), causal={form.causal!r},",
                     f'                      alignment="{form.alignment}", window={form.window!r}, '
                     f"chunk={form.chunk!r})  # True = keep"]
            mask_kw = "custom_mask=torch.from_numpy(np.ascontiguousarray(vis[b, 0, :n, lo:hi])).to(DEVICE)"
        else:
            mask_kw = flags
        body += ["", "def prefill(b, lo, hi):",
                 f'    """Sequence b against its keys lo..hi-1: {sp.call}."""',
                 "    n = SQ[b]",
                 "    return flashinfer.single_prefill_with_kv_cache(",
                 f"        q[b, :, :n].transpose(0, 1), {_kv_view(sp, 'k', 'b', 'lo', 'hi')},",
                 f"        {_kv_view(sp, 'v', 'b', 'lo', 'hi')}, kv_layout=\"{sp.kv_layout}\", return_lse=True,",
                 f"        {mask_kw}, **kw)", ""]
        if sp.kind == "single_prefill":
            body += ["for b, n in enumerate(SQ):", "    if n == 0:", "        continue",
                     "    o_b, lse_b = prefill(b, 0, SK[b])"]
        else:
            splits = [kv_splits(n) for n in sk]
            body += [f"SPLITS = {splits!r}  # each sequence's keys in three uneven splits (SEMANTICS.md §14)",
                     "for b, n in enumerate(SQ):", "    if n == 0:", "        continue",
                     "    parts = [prefill(b, lo, hi) for lo, hi in SPLITS[b]]"]
            if sp.merge == "merge_states":
                body += ["    o_b, lse_b = flashinfer.merge_states(torch.stack([p[0] for p in parts], dim=1),",
                         "                                         torch.stack([p[1] for p in parts], dim=1))"]
            else:
                body += ["    o_b, lse_b = parts[0]", "    for o_s, lse_s in parts[1:]:",
                         "        o_b, lse_b = flashinfer.merge_state(o_b, lse_b, o_s, lse_s)"]
        body += ["    out[b, :, :n] = o_b.transpose(0, 1)",
                 "    lse[b, :, :n] = lse_b.double().cpu().numpy().T * LN2"]
    elif sp.kind == "single_decode":
        extra = "".join(f", {k}={v!r}" for k, v in decode_scales.items())
        body += ["for b, n in enumerate(SQ):", "    if n == 0:", "        continue",
                 "    o_b, lse_b = flashinfer.single_decode_with_kv_cache(",
                 f"        q[b, :, 0].contiguous(), {_kv_view(sp, 'k', 'b', 0, 'SK[b]')},",
                 f"        {_kv_view(sp, 'v', 'b', 0, 'SK[b]')}, kv_layout=\"{sp.kv_layout}\", window_left={window},",
                 f"        return_lse=True{extra}, **kw)",
                 "    out[b, :, 0] = o_b",
                 "    lse[b, :, 0] = lse_b.double().cpu().numpy() * LN2"]
    elif sp.kind == "ragged":
        body += ["k_packed = torch.cat([k[b, :, :m].transpose(0, 1).contiguous() for b, m in enumerate(SK)])",
                 "v_packed = torch.cat([v[b, :, :m].transpose(0, 1).contiguous() for b, m in enumerate(SK)])",
                 _tensor_line("kv_indptr", fi.indptr(sk)),
                 'w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, kv_layout="NHD")',
                 *_wrapped("w.plan(", ["qo_indptr", "kv_indptr", str(Hq), str(Hkv), str(d), f"head_dim_vo={dv}",
                                       flags, "**kw", types], ")", 112),
                 "o, lse2 = w.run(q_packed, k_packed, v_packed, return_lse=True)",
                 "unpack(o, lse2, range(len(SQ)))"]
    else:  # the paged wrappers and the sink wrapper
        body += _pool_lines(fi, sp, form, inputs, sk)
        plan_args = ["kv_indptr", "kv_indices", "kv_last_page_len", str(Hq), str(Hkv), str(d), "PAGE"]
        if sp.kind == "paged_prefill":
            sinks = ", sinks=sink" if form.sinks is not None else ""
            body += [f'w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, kv_layout="{sp.kv_layout}")',
                     *_wrapped("w.plan(", ["qo_indptr", *plan_args, f"head_dim_vo={dv}", flags, "**kw", types],
                               ")", 112),
                     f"o, lse2 = w.run(q_packed, (k_cache, v_cache), return_lse=True{sinks})",
                     "unpack(o, lse2, range(len(SQ)))"]
        elif sp.kind == "paged_decode":
            extra = "".join(f", {k}={v!r}" for k, v in decode_scales.items())
            body += [f'w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout="{sp.kv_layout}")',
                     *_wrapped("w.plan(", [*plan_args, f"window_left={window}", "**kw", types], ")", 112),
                     f"o, lse2 = w.run(q[:, :, 0], (k_cache, v_cache), return_lse=True{extra})",
                     "out[:, :, 0] = o  # one query row per sequence",
                     "for b, n in enumerate(SQ):",
                     "    if n == 1:  # a sequence without its query row has no LSE row",
                     "        lse[b, :, 0] = lse2[b].double().cpu().numpy() * LN2"]
        else:
            scale = kw.get("sm_scale", d ** -0.5)
            body += [*_wrapped("w = flashinfer.BatchAttentionWithAttentionSinkWrapper(",
                               ["workspace", f'kv_layout="{sp.kv_layout}"', f"head_dim_qk={d}", f"head_dim_vo={dv}",
                                f"window_left={window}", types], ")", 112),
                     *_wrapped("w.plan(", ["qo_indptr", *plan_args, f"head_dim_vo={dv}", flags, types], ")", 112),
                     f"o, lse2 = w.run(q_packed, (k_cache, v_cache), sink, {scale!r}, return_lse=True)",
                     "unpack(o, lse2, range(len(SQ)))"]
    body += ["return {\"out\": out.double().cpu().numpy(), \"lse\": lse}"]

    library = f"FlashInfer flashinfer.{sp.call}" + ("" if adapter.entry_point else f" (flashinfer, per case: {entry})")
    run = ["import flashinfer", "import torch", ""] + body
    return CallPlan(
        library=library, device="cuda", observed=("out", "lse"), helpers=helpers, checked=checked,
        run_library=_function("run_library(inp)", f"The call under test: {library}. Returns float64 arrays: out "
                              "[B, Hq, Lq, dv] and the natural-log LSE [B, Hq, Lq].", run),
        cannot_run_here=_preflight("cuda", [("import flashinfer", "flashinfer-python")],
                                   f"FlashInfer runs on CUDA ({adapter.cc_text})"),
        versions=_versions(distribution_version("flashinfer-python"), "cuda"))


def _tensor_line(name: str, values) -> str:
    return f"{name} = {_tensor(values)}"


def _pool_lines(fi, sp, form: Case, inputs: CaseInputs, sk: list[int]) -> list[str]:
    """The K / V caches in the spelling's page layout and the page table (FlashInfer's ``kv_indptr``,
    ``kv_indices``, ``kv_last_page_len``, SEMANTICS.md §16), as `FlashInfer._pages` makes them."""
    lines = []
    if page_size_of(form.layout) is not None:
        store = inputs.paged
        lines += ["# the case's paged storage: pools [num_pages, Hkv, page_size, d] behind a shuffled block table, "
                  "NaN in",
                  "# decoy pages and in the slots past each sequence's length",
                  'k_pool, v_pool = inp["k_pool"], inp["v_pool"]']
    else:
        k = np.asarray(inputs.k if form.fp8 is None else inputs.fp8_codes(form.fp8)["k8"])
        v = np.asarray(inputs.v if form.fp8 is None else inputs.fp8_codes(form.fp8)["v8"])
        store = fi.dense_pages(k, v, sk, fi.DENSE_PAGE_SIZE)
        src = "8" if form.fp8 is not None else ""
        per_seq = store["block_table"].shape[1]
        lines += [f"# the dense K / V paged in order, {fi.DENSE_PAGE_SIZE} keys a page, zeros past each sequence's "
                  "length",
                  f"k_pool = np.zeros(({form.B * per_seq}, {form.Hkv}, {fi.DENSE_PAGE_SIZE}, {form.d}))",
                  f"v_pool = np.zeros(({form.B * per_seq}, {form.Hkv}, {fi.DENSE_PAGE_SIZE}, {form.dv}))",
                  "for b, m in enumerate(SK):",
                  f"    for p in range(-(-m // {fi.DENSE_PAGE_SIZE})):",
                  f"        j0, j1 = p * {fi.DENSE_PAGE_SIZE}, min((p + 1) * {fi.DENSE_PAGE_SIZE}, m)",
                  f'        k_pool[b * {per_seq} + p, :, : j1 - j0] = inp["k{src}"][b, :, j0:j1]',
                  f'        v_pool[b * {per_seq} + p, :, : j1 - j0] = inp["v{src}"][b, :, j0:j1]']
    size = int(store["page_size"])
    table = fi.page_table(store["block_table"], sk, size)
    kv_dtype = "k.dtype"
    if sp.kv_layout == "NHD":
        lines += ["# FlashInfer's NHD pages: [num_pages, page_size, Hkv, d]",
                  "k_pool, v_pool = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (k_pool, v_pool))"]
    lines += [f"k_cache = torch.from_numpy(np.ascontiguousarray(k_pool)).to({kv_dtype}).to(DEVICE)",
              f"v_cache = torch.from_numpy(np.ascontiguousarray(v_pool)).to({kv_dtype}).to(DEVICE)",
              f"PAGE = {size}",
              "# the page table: each sequence's used pages (the first ceil(len / PAGE) block-table entries)",
              _tensor_line("kv_indptr", table["kv_indptr"]),
              _tensor_line("kv_indices", table["kv_indices"]),
              _tensor_line("kv_last_page_len", table["kv_last_page_len"])]
    return lines
