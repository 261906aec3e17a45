"""Mutation testing in CI: every mutant's patch still applies, and the ci checks kill every mutant.

``test_mutation_score_ci`` is the table of ``python -m attention_conformance mutants --profile ci``: each mutant
of `property_tests.mutants.catalog` must be killed (FAIL, CRASH or TIMEOUT on some check) within 60 s.
``test_unmutated_kernels_survive`` is the control: the same checks on the *correct* kernels find
nothing, so a kill means the seeded bug was detected, not that the harness rejects everything.
"""

from __future__ import annotations

import pytest

from attention_conformance.property_tests.mutants.apply import check_applies, source_of
from attention_conformance.property_tests.mutants.catalog import MUTANTS
from attention_conformance.property_tests.mutants.runner import (
    build_adapter,
    format_table,
    run_all,
    run_mutant,
    score_line,
)

TIME_LIMIT = 60.0

#: mutants whose bug needs two features together (each survived the ci catalog before its "pairs" family), with
#: the combination of feature values (conformance.cases.features) where the bug shows
COMBINATION_OF = {
    "combo_softcap_skipped_with_bias": lambda v: v["softcap"] == "on" and v["bias"] == "on",
    "combo_window_left_dropped_mqa": lambda v: v["window"] in ("left", "both") and v["heads"] == "mqa",
    "combo_mask_read_at_kv_head": lambda v: v["mask"] == "on" and v["heads"] != "mha",
    "combo_bias_read_at_kv_head": lambda v: v["bias"] == "on" and v["heads"] != "mha",
    "combo_bwd_dP_over_d_columns": lambda v: v["dv"] == "gt" and v["backward"] == "on",
    "combo_paged_drops_window": lambda v: v["layout"] == "paged" and v["window"] != "none",
    "combo_fp8_softcap_on_codes": lambda v: v["fp8"] != "none" and v["softcap"] == "on",
    "combo_varlen_drops_softcap": lambda v: v["varlen"] == "on" and v["softcap"] == "on",
    "combo_bshd_dout_as_contiguous": lambda v: v["layout"] == "bshd" and v["backward"] == "on",
    "combo_causal_mask_bottom_right": lambda v: v["causal"] == "top_left" and v["mask"] == "on",
}
COMBINATIONS = list(COMBINATION_OF)

#: the bug classes the mutation score requires, each mapped to the mutant(s) that seed it
REQUIRED = {
    "alpha missing on l": ["fa2_alpha_missing_on_l", "fa1_alpha_missing_on_l"],
    "alpha missing on O": ["fa2_alpha_missing_on_O"],
    "alpha applied to the new block": ["fa2_alpha_on_new_block"],
    "scale 1/d or missing": ["common_scale_1_over_d", "fa2_scale_missing"],
    "causal <= changed to <": ["common_causal_lt"],
    "alignment swapped": ["common_alignment_swapped"],
    "tail block dropped": ["common_tail_block_dropped"],
    "tail block over-read": ["common_tail_over_read"],
    "padded / out-of-bounds rows read (no bounds check on the tile load)": [
        "fa2_reads_padded_v", "fa2_bwd_reads_padded_dout", "fa1_reads_padded_k", "fa3_reads_padded_q"],
    "fully masked row giving NaN": ["fa2_masked_row_nan"],
    "fully masked row giving mean(V)": ["fa2_masked_row_mean_v"],
    "LSE sign convention wrong": ["fa2_lse_plus_inf", "fa2_lse_negated"],
    "GQA mapping h % Hkv": ["fa2_gqa_modulo"],
    "split merge averaging normalised outputs": ["split_merge_average"],
    "merge mishandling -inf": ["split_merge_multiplies_empty", "split_merge_all_empty_nan"],
    "dS without D": ["fa2_bwd_dS_without_D"],
    "dK missing scale": ["fa2_bwd_dK_missing_scale"],
    "dK/dV not reduced over the GQA group": ["fa2_bwd_gqa_not_reduced"],
    "backward ignoring the mask": ["fa2_bwd_ignores_mask"],
    "softcap after masking, or s * tanh(s)": ["fa2_softcap_after_masking", "fa2_softcap_s_tanh_s"],
    "l accumulated in bf16": ["fa2_l_in_bf16"],
    "input mutated in place": ["wrap_input_mutated_in_place"],
    "non-contiguous input read as contiguous": ["wrap_noncontiguous_as_contiguous"],
    "no max subtraction": ["fa2_no_max_subtraction"],
    "FP8 V descale not applied": ["fp8_v_descale_missing"],
    "Hadamard applied to Q only": ["fp8_hadamard_q_only"],
    "P not rescaled by the FP8 max offset": ["fp8_p_no_max_offset"],
    "paged-KV block table out-of-bounds read (FA #2709)": [
        "paged_reads_past_seqlen", "paged_last_page_over_read", "paged_table_not_consulted", "paged_table_row_stride"],
    "a bug living only in a combination of two features": COMBINATIONS,
}


def test_catalog_size_and_required_bug_classes():
    """>= 25 mutants with unique names, and every required bug class has its mutant(s) in the catalog."""
    names = [m.name for m in MUTANTS]
    assert len(names) >= 25, f"only {len(names)} mutants in the catalog (need >= 25)"
    assert len(set(names)) == len(names), f"duplicate mutant names: {sorted(n for n in names if names.count(n) > 1)}"
    missing = {cls: [n for n in ms if n not in names] for cls, ms in REQUIRED.items()}
    missing = {cls: ms for cls, ms in missing.items() if ms}
    assert not missing, f"required bug classes without their mutant in catalog.py: {missing}"


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.module], ids=lambda m: m.name)
def test_mutant_patches_apply(mutant):
    """Each edit's text occurs exactly once (in its function) in the *current* kernel source, so an edit
    of kernels/reference/*.py cannot silently disable a mutant; the patched module compiles and loads."""
    check_applies(mutant.module, mutant.edits, mutant.name)
    adapter = build_adapter(mutant)
    src, path = source_of(mutant.module)
    assert all(e.old in src for e in mutant.edits), f"{mutant.name}: edit text vanished from {path}"
    assert adapter.kernel is not __import__(mutant.module, fromlist=["_"]), (
        f"{mutant.name}: the adapter runs the unmutated module {mutant.module}")


@pytest.mark.parametrize("name", COMBINATIONS)
def test_combination_mutant_is_killed_by_the_pairs_family(name):
    """The catalog's ``pairs`` family (conformance.cases.features, conformance.cases.covering) kills each combination
    mutant on its own, and only through cases that hold its two features together: on every claimed pairs case
    without the combination the mutant passes, as the correct kernel does."""
    from attention_conformance.cases import catalog, features
    from attention_conformance.property_tests.kernel_check import evaluate
    from attention_conformance.property_tests.mutants.catalog import by_name

    adapter = build_adapter(by_name(name))
    holds = COMBINATION_OF[name]
    pairs = [c for c in catalog.cases("ci") if c.family == "pairs" and adapter.supports(c, "cpu") is None]
    killed = {c.id for c in pairs if evaluate(adapter, c).failed}
    assert killed, f"{name}: no pairs case kills it ({len(pairs)} claimed pairs cases)"
    outside = sorted(c.id for c in pairs if c.id in killed and not holds(features.values_of(c)))
    assert not outside, f"{name}: killed by pairs cases without its combination: {outside}"
    assert len(killed) < len(pairs), f"{name}: every pairs case kills it"


def test_unmutated_kernels_survive():
    """Control: with an empty edit list (the correct kernel) the pinned + Hypothesis checks find nothing."""
    from attention_conformance.property_tests.mutants.catalog import Mutant

    for adapter in sorted({m.adapter for m in MUTANTS}):
        control = Mutant(f"control_{adapter}", "none", "-", adapter, wrapper="identity")
        res = run_mutant(control, "ci", time_limit=TIME_LIMIT, order=("properties",))
        assert not res.error, f"control {adapter}: {res.error}"
        assert not res.killed, (f"control {adapter}: the correct kernel was 'killed' by {res.check} "
                                f"on {res.counterexample}: {res.message}")


# a seeded bug overflows or makes NaN by design (no max subtraction, NaN rows); numpy says so while it runs
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
def test_mutation_score_ci(record_property):
    """The ci mutant table: every mutant killed within 60 s (stop at the first failing check).

    Run without the pinned examples (engine catalog first, then Hypothesis-generated cases only), so
    the score does not rest on examples written after the mutants; ``python -m attention_conformance mutants``
    (default order, pinned examples first) is faster still. The table appears in pytest's terminal
    summary."""
    results = run_all(MUTANTS, "ci", time_limit=TIME_LIMIT, order=("conformance", "generated"))
    table = format_table(results)
    line = score_line(results, TIME_LIMIT)
    record_property("terminal_summary", table + "\n" + line)  # printed after the progress lines (tests/conftest.py)
    survivors = [f"{r.name} ({r.error or r.message or 'not killed'})" for r in results
                 if not (r.killed and r.seconds <= TIME_LIMIT)]
    assert not survivors, f"{line}; survivors / slow kills: {survivors}"
