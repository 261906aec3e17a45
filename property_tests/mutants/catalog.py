"""The mutant catalog: one seeded bug per entry, on a correct NumPy reference kernel.

Each `Mutant` is either

- a *source* mutant: a few exact textual `Edit`s (usually one line) applied to an in-memory copy of a
  ``kernels/reference/*.py`` module (`property_tests.mutants.apply`), wrapped in the reference adapter
  named by ``adapter``; or
- a *wrapper* mutant: the unmodified reference adapter wrapped by a bug in the adapter layer
  (`property_tests.mutants.wrappers`): inputs mutated in place, a strided tensor read as contiguous,
  the Hadamard transform undone on K.

The bug classes are those real kernels have had (upstream issues, named per mutant) and the seed lab's three edits
([FA-anim] "修改题": drop alpha on the old numerator, drop 1/sqrt(d), causal <= changed to <). The
SEMANTICS.md section each one violates is in ``violates``. `test_mutant_patches_apply` checks that
every edit still applies to the current kernel sources.
"""

from __future__ import annotations

from dataclasses import dataclass

from attention_conformance.property_tests.mutants.apply import Edit

__all__ = ["Mutant", "MUTANTS", "by_name"]

FWD = "def forward("
BWD = "def backward("
COMBINE = "def combine("
PARTIALS = "def forward_partials("
ATTEND = "def _attend("
PAGED = "def paged_tile("


@dataclass(frozen=True)
class Mutant:
    """One seeded bug. ``module`` + ``edits`` for source mutants, ``wrapper`` for adapter-level ones."""

    name: str
    bug_class: str
    violates: str  # SEMANTICS.md section(s)
    adapter: str  # the built-in reference adapter the mutant is wrapped in
    module: str | None = None  # the kernel module patched
    edits: tuple[Edit, ...] = ()
    wrapper: str | None = None  # a function name in property_tests.mutants.wrappers
    origin: str = ""  # where the bug class was reported (issue number, seed edit)

    @property
    def kind(self) -> str:
        return "source" if self.module else "wrapper"


def _m(name, bug_class, violates, adapter, module=None, edits=(), wrapper=None, origin=""):
    return Mutant(name, bug_class, violates, adapter, module, tuple(edits), wrapper, origin)


_COMMON = "attention_conformance.kernels.reference._common"
_FA1 = "attention_conformance.kernels.reference.fa1"
_FA2 = "attention_conformance.kernels.reference.fa2"
_FA3 = "attention_conformance.kernels.reference.fa3"
_SPLIT = "attention_conformance.kernels.reference.splitkv"

MUTANTS: tuple[Mutant, ...] = (
    # -- online softmax bookkeeping (FA2 forward) ----------------------------------------------
    _m("fa2_alpha_missing_on_l", "alpha missing on l", "§12", "reference-fa2", _FA2,
       [Edit("l = alpha * l + P.sum(axis=-1)", "l = l + P.sum(axis=-1)", FWD)],
       origin="[FA-anim] troubleshooting: 'm 改变时只缩放了分子'"),
    _m("fa2_alpha_missing_on_O", "alpha missing on O (seed edit 1)", "§12", "reference-fa2", _FA2,
       [Edit("acc = alpha[..., None] * acc", "acc = acc", FWD)],
       origin="seed lab edit 1: delete alpha on the old numerator"),
    _m("fa2_alpha_on_new_block", "alpha applied to the new block instead of the old", "§12", "reference-fa2",
       _FA2, [Edit("acc = alpha[..., None] * acc", "acc = acc", FWD),
              Edit("acc = acc + emulate.matmul(emulate.round_to(P, p.dtype), V[:, :, c0:c1], p.dtype)",
                   "acc = acc + alpha[..., None] * emulate.matmul(emulate.round_to(P, p.dtype), V[:, :, c0:c1], "
                   "p.dtype)", FWD)]),
    _m("fa1_alpha_missing_on_l", "alpha missing on l (FA1 loop order)", "§12", "reference-fa1", _FA1,
       [Edit("l_new = alpha * li + beta * l_tile", "l_new = li + beta * l_tile", FWD)]),
    _m("fa2_no_max_subtraction", "no max subtraction (exp overflows on large logits)", "§12", "reference-fa2",
       _FA2, [Edit("m_new = np.maximum(m, s.max(axis=-1))",
                   "m_new = np.maximum(m, np.where(s.max(axis=-1) > -np.inf, 0.0, -np.inf))", FWD)],
       origin="torch #160841, #119131 (overflow of QK^T / exp)"),
    _m("fa2_l_in_bf16", "l accumulated in bf16", "TOLERANCES (precision)", "reference-fa2", _FA2,
       [Edit("l = alpha * l + P.sum(axis=-1)", 'l = emulate.round_to(alpha * l + P.sum(axis=-1), "bfloat16")', FWD)]),
    _m("fa3_exp_instead_of_exp2", "exp2 rescale evaluated with exp (alpha wrong)", "§12", "reference-fa3", _FA3,
       [Edit("alpha = np.exp2((m - m_safe) * LOG2E)", "alpha = np.exp((m - m_safe) * LOG2E)", ATTEND)]),
    # -- score pipeline -------------------------------------------------------------------------
    _m("fa2_scale_missing", "scale missing (seed edit 2)", "§2", "reference-fa2", _FA2,
       [Edit("s = s * p.scale", "s = s", FWD)], origin="seed lab edit 2: drop 1/sqrt(d)"),
    _m("common_scale_1_over_d", "default scale 1/d instead of 1/sqrt(d)", "§2", "reference-fa2", _COMMON,
       [Edit("float(1.0 / np.sqrt(d)) if scale is None", "float(1.0 / d) if scale is None")]),
    _m("fa2_softcap_s_tanh_s", "softcap computed as s * tanh(s)", "§3", "reference-fa2", _FA2,
       [Edit("s = p.softcap * np.tanh(s / p.softcap)", "s = s * np.tanh(s)", FWD)], origin="flash-attention #2396"),
    _m("fa2_softcap_after_masking", "softcap applied after bias and masking", "§3", "reference-fa2", _FA2,
       [Edit("s = p.softcap * np.tanh(s / p.softcap)", "s = s", FWD),
        Edit("s = np.where(vis, s, -np.inf)",
             "s = np.where(vis, s, -np.inf) if p.softcap is None else "
             "p.softcap * np.tanh(np.where(vis, s, -np.inf) / p.softcap)", FWD)]),
    _m("fa2_bias_ignored", "additive bias dropped", "§6", "reference-fa2", _FA2,
       [Edit("s = s + p.bias_tile(r0, r1, c0, c1)", "s = s", FWD)]),
    # -- masking, alignment, tails --------------------------------------------------------------
    _m("common_causal_lt", "causal <= changed to < (seed edit 3)", "§4", "reference-fa2", _COMMON,
       [Edit("ok = ok & (j <= diag + self.right)", "ok = ok & (j < diag + self.right)")],
       origin="seed lab edit 3"),
    _m("common_alignment_swapped", "causal alignment swapped (top-left for bottom-right)", "§4", "reference-fa2",
       _COMMON, [Edit('if alignment == "bottom_right" else np.zeros', 'if alignment == "top_left" else np.zeros')],
       origin="flash-attention #1778, #517, #282"),
    _m("common_window_left_off_by_one", "window left bound off by one", "§5", "reference-fa2", _COMMON,
       [Edit("ok = ok & (j >= diag - self.left)", "ok = ok & (j > diag - self.left)")],
       origin="flash-attention #1133, #1116"),
    _m("common_tail_block_dropped", "tail block dropped", "§1", "reference-fa2", _COMMON,
       [Edit("for start in range(0, length, block)]", "for start in range(0, length - length % block, block)]")],
       origin="[FA-anim] N=5, tile=4 causal tail"),
    _m("common_tail_over_read", "tail block over-read (keys past seqlens_k attended)", "§7", "reference-fa2",
       _COMMON, [Edit("& (j < self.len_k[:, None, None])", "& (j < self.Lk)")],
       origin="flash-attention #443, #752"),
    _m("fa2_masked_row_nan", "fully masked row gives NaN", "§8", "reference-fa2", _FA2,
       [Edit("out[:, :, r0:r1] = np.where(l[..., None] > 0, acc / l[..., None], 0.0)",
             "out[:, :, r0:r1] = acc / l[..., None]", FWD)], origin="torch #103963"),
    _m("fa2_masked_row_mean_v", "fully masked row gives mean(V) (finfo.min instead of -inf)", "§8",
       "reference-fa2", _FA2,
       [Edit("s = np.where(vis, s, -np.inf)", "s = np.where(vis, s, np.finfo(np.float32).min)", FWD)],
       origin="torch #110213"),
    _m("fa2_lse_plus_inf", "LSE sign convention wrong (+inf on fully masked rows)", "§8, §12", "reference-fa2",
       _FA2, [Edit("lse[:, :, r0:r1] = np.where(l > 0, m + np.log(l), -np.inf)",
                   "lse[:, :, r0:r1] = np.where(l > 0, m + np.log(l), np.inf)", FWD)],
       origin="FA2 CUDA convention (SEMANTICS.md §8 table); flash-attention #2842"),
    _m("fa2_lse_negated", "LSE sign flipped (stores -LSE)", "§12", "reference-fa2", _FA2,
       [Edit("lse[:, :, r0:r1] = np.where(l > 0, m + np.log(l), -np.inf)",
             "lse[:, :, r0:r1] = np.where(l > 0, -(m + np.log(l)), -np.inf)", FWD)]),
    _m("fa2_gqa_modulo", "GQA mapping h % Hkv instead of h // G", "§9", "reference-fa2", _FA2,
       [Edit("kv_head = np.arange(p.Hq) // p.group", "kv_head = np.arange(p.Hq) % p.Hkv", FWD)],
       origin="flash-attention #648; torch #193893"),
    # -- bounds checks: padded / out-of-bounds rows read (killed by NaN padding, SEMANTICS.md §7) ----
    # The references load tiles through Problem.load_q_rows / load_k_rows (padded rows read as 0); each
    # mutant drops one such check, so the NaN a ``nan_padding`` input holds in padded rows reaches a result
    # through P = 0 times NaN (the mask sets the score to -inf, but the product 0 * NaN stays NaN).
    _m("fa2_reads_padded_v", "FA2 forward V tile loaded without the bounds check (padded V rows read)", "§7",
       "reference-fa2", _COMMON, [Edit("self.v = self.load_k_rows(self.v)", "self.v = self.v")],
       origin="torch #101967 (NaN in masked-out K/V poisons the output)"),
    _m("fa2_bwd_reads_padded_dout", "FA2 backward dO rows loaded without the bounds check (padded dO read)",
       "§7, §13", "reference-fa2", _FA2, [Edit("dO = p.load_q_rows(dO)", "dO = dO", BWD)],
       origin="flash-attention #443, #752 (NaN gradients from padded rows in varlen)"),
    _m("fa1_reads_padded_k", "FA1 K tile loaded without the bounds check (padded K rows read: NaN dQ)", "§7, §13",
       "reference-fa1", _COMMON, [Edit("self.k = self.load_k_rows(self.k)", "self.k = self.k")],
       origin="flash-attention #443, #752 (NaN dQ at padded keys in varlen)"),
    _m("fa3_reads_padded_q", "FA3 Q tile loaded without the bounds check (padded Q rows read: NaN dK)", "§7, §13",
       "reference-fa3", _COMMON, [Edit("self.q = self.load_q_rows(self.q)", "self.q = self.q")],
       origin="flash-attention #443, #752"),
    # -- split-KV ---------------------------------------------------------------------------------
    _m("split_merge_average", "split merge averages the normalised partial outputs", "§14", "reference-splitkv",
       _SPLIT, [Edit("out = np.sum(weighted, axis=0)", "out = np.mean(outs, axis=0)", COMBINE)],
       origin="[FA-anim] exercise 1 (6 instead of 4); [FA2-ch] 2.668533 instead of 1.612955"),
    _m("split_merge_multiplies_empty", "merge mishandles -inf: an empty split's garbage O is multiplied by 0, "
       "not selected out", "§14", "reference-splitkv", _SPLIT,
       [Edit("outs[split, :, :, r0:r1] = np.where(l[..., None] > 0, acc / l[..., None], 0.0)",
             "outs[split, :, :, r0:r1] = acc / l[..., None]", PARTIALS),
        Edit("weighted = np.where(lses[..., None] == -np.inf, 0.0, scales[..., None] * outs)",
             "weighted = scales[..., None] * outs", COMBINE)],
       origin="flash-attention #2842, #1647"),
    _m("split_merge_all_empty_nan", "merge forms -inf - -inf when every split is empty (NaN LSE)", "§8, §14",
       "reference-splitkv", _SPLIT,
       [Edit("lse_max_safe = np.where(lse_max == -np.inf, 0.0, lse_max).astype(lses.dtype)",
             "lse_max_safe = lse_max", COMBINE),
        Edit("lse = np.where(weight_sum > 0, lse_max_safe + np.log(weight_sum), -np.inf).astype(lses.dtype)",
             "lse = (lse_max_safe + np.log(weight_sum)).astype(lses.dtype)", COMBINE)]),
    # -- paged K/V (block table, SEMANTICS.md §16): killed by the NaN the paged inputs hold in decoy pages,
    # slots past each sequence's length and table entries past its last page (conformance catalog "paged") --
    _m("paged_reads_past_seqlen", "paged K/V read past the sequence end: the page loop bounded by the tile, not "
       "seqlens_k (table entries past the last page and slots past the length read)", "§16, §7",
       "reference-splitkv", _SPLIT, [Edit("stop = min(c1, int(len_k[b]))", "stop = c1", PAGED)],
       origin="flash-attention #2709 (block table out-of-bounds read)"),
    _m("paged_last_page_over_read", "paged K/V: the last page read whole (bounds check rounded up to the page)",
       "§16, §7", "reference-splitkv", _SPLIT,
       [Edit("stop = min(c1, int(len_k[b]))", "stop = min(c1, -(-int(len_k[b]) // page_size) * page_size)",
             PAGED)],
       origin="flash-attention #2709"),
    _m("paged_table_not_consulted", "paged K/V: block table not consulted (pages assumed contiguous per sequence)",
       "§16", "reference-splitkv", _SPLIT,
       [Edit("phys = int(table[b * table_stride + page])", "phys = b * table_stride + page", PAGED)]),
    _m("paged_table_row_stride", "paged K/V: block-table batch stride taken from the longest sequence's page "
       "count, not the table's row width (another batch's row read)", "§16", "reference-splitkv", _SPLIT,
       [Edit("table_stride = block_table.shape[1]", "table_stride = -(-int(np.max(len_k)) // page_size)", PAGED)],
       origin="block_table_batch_stride (kernels/cuda/include/attn_params.h)"),
    # -- backward -------------------------------------------------------------------------------
    _m("fa2_bwd_dS_without_D", "dS without D (dS = P * dP)", "§13", "reference-fa2", _FA2,
       [Edit("dS = P * (dP - D[:, :, r0:r1, None])", "dS = P * dP", BWD)]),
    _m("fa2_bwd_dK_missing_scale", "dK missing the softmax scale", "§13", "reference-fa2", _FA2,
       [Edit("dKj = dKj + emulate.matmul(dS.swapaxes(-1, -2), Qi, p.dtype) * p.scale",
             "dKj = dKj + emulate.matmul(dS.swapaxes(-1, -2), Qi, p.dtype)", BWD)]),
    _m("fa2_bwd_gqa_not_reduced", "dK/dV not reduced over the GQA group (first head taken)", "§9, §13",
       "reference-fa2", _FA2,
       [Edit("dK = dK.reshape(p.B, p.Hkv, p.group, p.Lk, p.d).sum(axis=2)",
             "dK = dK.reshape(p.B, p.Hkv, p.group, p.Lk, p.d)[:, :, 0]", BWD),
        Edit("dV = dV.reshape(p.B, p.Hkv, p.group, p.Lk, p.dv).sum(axis=2)",
             "dV = dV.reshape(p.B, p.Hkv, p.group, p.Lk, p.dv)[:, :, 0]", BWD)],
       origin="flash-attention #648"),
    _m("fa2_bwd_ignores_mask", "backward ignores the mask", "§13", "reference-fa2", _FA2,
       [Edit("s = np.where(vis, s, -np.inf)", "s = s", BWD)], origin="flash-attention #443, #752"),
    _m("fa2_bwd_masked_row_nan", "backward forms -inf - -inf on fully masked rows (NaN dQ)", "§8, §13",
       "reference-fa2", _FA2, [Edit("L_safe = np.where(L == -np.inf, 0.0, L).astype(p.acc)", "L_safe = L", BWD)],
       origin="torch #196678, flash-attention #443"),
    _m("fa1_bwd_dq_missing_scale", "dQ missing the softmax scale (FA1 backward)", "§13", "reference-fa1", _FA1,
       [Edit("dQ[:, :, r0:r1] = dQ[:, :, r0:r1] + emulate.matmul(dS, Kj, p.dtype) * p.scale",
             "dQ[:, :, r0:r1] = dQ[:, :, r0:r1] + emulate.matmul(dS, Kj, p.dtype)", BWD)]),
    # -- 2026 contract: sinks, chunks, KV append (SEMANTICS.md §18-§20) -------------------------------
    _m("fa2_sink_not_in_running_max", "sink left out of the running max: added to l at the end as exp(sink - m) "
       "(NaN LSE on rows with no visible key, +inf LSE for a large sink)", "§18", "reference-fa2", _FA2,
       [Edit("m, l = p.initial_state(r1 - r0)",
             "m, l = (np.full((p.B, p.Hq, r1 - r0), -np.inf, dtype=p.acc), np.zeros((p.B, p.Hq, r1 - r0), "
             "dtype=p.acc))", FWD),
        Edit("out[:, :, r0:r1] = np.where(l[..., None] > 0, acc / l[..., None], 0.0)",
             "l = l if p.sinks is None else l + np.exp(p.sinks[None, :, None] - m)\n"
             "            out[:, :, r0:r1] = np.where(l[..., None] > 0, acc / l[..., None], 0.0)", FWD)],
       origin="flash-attention PR #2752 (Softmax.finalize(sink_val=...) with row_max = -inf)"),
    _m("fa2_dsink_without_dlse", "d sink without its dLSE term (only -sum P_sink D)", "§18", "reference-fa2", _FA2,
       [Edit("return (*grads, p.sink_grad(L, D))", "return (*grads, p.sink_grad(L, D_out))", BWD)],
       origin="flash-attention #1973, #2102, PR #2706 review (dSink's dLSE contribution untested)"),
    _m("fa2_dsink_missing", "sink backward missing: d sink not returned", "§18", "reference-fa2", _FA2,
       [Edit("return (*grads, p.sink_grad(L, D))", "return grads", BWD)],
       origin="flash-attention #1973, #2102 (bwd without sink)"),
    _m("common_chunk_edge_off_by_one", "chunk edge off by one (the query's chunk taken from position c(i) - 1)",
       "§19", "reference-fa2", _COMMON,
       [Edit("ok = ok & (diag // self.chunk == j // self.chunk)",
             "ok = ok & ((diag - 1) // self.chunk == j // self.chunk)")],
       origin="Llama 4 attention_chunk"),
    _m("splitkv_cache_read_past_sequence", "KV append: the cache read up to its physical length, not "
       "cache_seqlens + Ln", "§20, §7", "reference-splitkv", _SPLIT,
       [Edit("k, v, seqlens_k = append_kv(k, v, k_new, v_new, cache_seqlens)",
             "k, v, _ = append_kv(k, v, k_new, v_new, cache_seqlens)", FWD)],
       origin="flash-attention #1417 (output depends on the physical cache length)"),
    _m("splitkv_sink_per_split", "split-KV adds the sink in every split instead of once in the combine", "§18, §14",
       "reference-splitkv", _SPLIT,
       [Edit("out, lse = combine(outs, lses, sinks)",
             "out, lse = combine(outs, lses) if sinks is None else combine(np.concatenate([outs] + [np.zeros_like("
             "outs[:1])] * (len(outs) - 1)), np.concatenate([lses] + [np.broadcast_to(np.asarray(sinks, "
             "dtype=lses.dtype)[:, None], lses.shape[1:])[None]] * (len(outs) - 1)), sinks)", FWD)]),
    # -- FP8 --------------------------------------------------------------------------------------
    _m("fp8_v_descale_missing", "FP8 V descale not applied", "§10", "reference-fa3-fp8", _FA3,
       [Edit("o = o * v_end[:, :, None, None]", "o = o", ATTEND),
        Edit("PV = PV * v_tiles[:, kv_head, j, None, None]", "PV = PV", ATTEND)]),
    _m("fp8_p_no_max_offset", "P not rescaled by the FP8 max offset (P in [0, 1] rounded to FP8)", "§10",
       "reference-fa3-fp8", _FA3, [Edit("FP8_P_OFFSET = 8.0", "FP8_P_OFFSET = 0.0")],
       origin="FA3 paper: P scaled into the FP8 range before the PV product"),
    _m("fp8_p_saturates", "FP8 P offset too large: P saturates past 448", "§10", "reference-fa3-fp8", _FA3,
       [Edit("FP8_P_OFFSET = 8.0", "FP8_P_OFFSET = 9.5")], origin="flash-attention #2577, #2716"),
    _m("fp8_hadamard_q_only", "Hadamard applied to Q only (K left unrotated)", "§11", "reference-fa3-fp8",
       wrapper="hadamard_q_only"),
    # -- adapter layer ----------------------------------------------------------------------------
    _m("wrap_input_mutated_in_place", "input mutated in place (Q pre-scaled in the caller's buffer)", "base.py",
       "reference-fa2", wrapper="input_mutated_in_place"),
    _m("wrap_noncontiguous_as_contiguous", "non-contiguous input read as contiguous", "§1", "reference-fa2",
       wrapper="noncontiguous_as_contiguous", origin="flash-attention #355; torch #191937"),
    # -- combinations: each bug lives only where two features meet (killed by the catalog's "pairs" family;
    # no case of the ci catalog before it combined the two) --------------------------------------------
    _m("combo_softcap_skipped_with_bias", "softcap skipped when an additive bias is present", "§3, §6",
       "reference-fa2", _FA2, [Edit("if p.softcap is not None:", "if p.softcap is not None and p.bias is None:", FWD)],
       origin="pair softcap x bias"),
    _m("combo_window_left_dropped_mqa", "sliding-window left bound dropped for MQA (one K/V head)", "§5, §9",
       "reference-fa2", _COMMON, [Edit("if self.left is not None:", "if self.left is not None and self.Hkv > 1:")],
       origin="pair window x heads=mqa"),
    _m("combo_mask_read_at_kv_head", "per-head boolean mask read at the K/V head index (h // G) with GQA/MQA",
       "§6, §9", "reference-fa2", _COMMON,
       [Edit("self.mask = np.broadcast_to(m, full)",
             "self.mask = np.broadcast_to(m if m.shape[1] == 1 else m[:, np.arange(Hq) // (Hq // Hkv)], full)")],
       origin="pair mask x heads=gqa (torch #177842 class)"),
    _m("combo_bias_read_at_kv_head", "per-head additive bias read at the K/V head index (h // G) with GQA/MQA",
       "§6, §9", "reference-fa2", _COMMON,
       [Edit("self.bias = np.broadcast_to(b.astype(self.acc), full)",
             "self.bias = np.broadcast_to((b if b.shape[1] == 1 else b[:, np.arange(Hq) // (Hq // Hkv)])"
             ".astype(self.acc), full)")],
       origin="pair bias x heads=gqa"),
    _m("combo_bwd_dP_over_d_columns", "backward dP = dO V^T summed over d columns, not dv (wrong only for dv > d)",
       "§9, §13", "reference-fa2", _FA2,
       [Edit("dP = emulate.matmul(dOi, Vj.swapaxes(-1, -2), p.dtype)",
             "dP = emulate.matmul(dOi[..., :p.d], Vj[..., :p.d].swapaxes(-1, -2), p.dtype)", BWD)],
       origin="pair dv>d x backward"),
    _m("combo_paged_drops_window", "paged K/V entry point drops the sliding window", "§5, §16", "reference-splitkv",
       _SPLIT, [Edit("p = Problem(q, k0, v0, **kw)", "p = Problem(q, k0, v0, **dict(kw, window=None))",
                     "def _paged_problem(")],
       origin="pair layout=paged x window"),
    _m("combo_fp8_softcap_on_codes", "FP8: softcap applied to the code-domain scores, before the Q/K descales",
       "§3, §10", "reference-fa3-fp8", _FA3,
       [Edit("                if q_rows is not None:\n",
             "                if q_rows is not None and p.softcap is not None:\n"
             "                    s = p.softcap * np.tanh(s * p.scale / p.softcap) / p.scale\n"
             "                if q_rows is not None:\n", ATTEND),
        Edit("if p.softcap is not None:", "if p.softcap is not None and q_rows is None:", ATTEND)],
       origin="pair softcap x fp8"),
    _m("combo_varlen_drops_softcap", "softcap not forwarded on the varlen entry point", "§3, §7", "reference-fa2",
       wrapper="varlen_drops_softcap", origin="pair softcap x varlen"),
    _m("combo_bshd_dout_as_contiguous", "backward reads a bshd dO as contiguous (its strides ignored)", "§1, §13",
       "reference-fa2", wrapper="bshd_dout_as_contiguous", origin="pair layout=bshd x backward; flash-attention #355"),
    _m("combo_causal_mask_bottom_right", "causal folded into a boolean mask bottom-right, ignoring top-left",
       "§4, §6", "reference-fa2", wrapper="causal_mask_bottom_right", origin="pair causal=top_left x mask"),
)


def by_name(name: str) -> Mutant:
    """The mutant called ``name``; KeyError lists the known names."""
    for m in MUTANTS:
        if m.name == name:
            return m
    raise KeyError(f"unknown mutant {name!r}; known: {[m.name for m in MUTANTS]}")
