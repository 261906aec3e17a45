"""A plain function whose signature does not take torch SDPA's keywords the way the harness passes them: the notes
(conformance/adapters/sdpa_signature.py) name what happens to each keyword, the front ends print them before the
run, and every failure of the function repeats them (report.md, pytest's failure text). Verdicts are unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attention_conformance.adapters.sdpa_signature import signature_notes
from attention_conformance.adapters.third_party import load_impl

torch = pytest.importorskip("torch")

# a function that names causality its own way and ignores what lands in **kw: every causal case computes the
# non-causal answer (the mistake a flash-attn-style wrapper makes when handed SDPA's keywords)
OWN_NAMES = '''
import torch

def attention(q, k, v, causal=False, scale=None, **kw):
    s = (q.double() @ k.double().transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return (s.softmax(-1) @ v.double()).to(q.dtype)
'''


def test_a_function_with_sdpas_signature_gets_no_note():
    from attention_conformance.examples import good_sdpa

    assert signature_notes(good_sdpa.attention) == []
    assert signature_notes(torch.nn.functional.scaled_dot_product_attention) == []  # a builtin: nothing to read


def test_own_names_and_keywords_landing_in_kwargs_are_named():
    def attention(q, k, v, causal=False, scale=None, **kw):
        return q

    notes = signature_notes(attention)
    assert len(notes) == 2, notes
    assert "takes `causal`, not torch SDPA's `is_causal`" in notes[0] and "default (= False)" in notes[0]
    assert "`is_causal` lands in `**kw`" in notes[0]
    assert "`attn_mask`, `enable_gqa` are not named" in notes[1] and "`**kw`" in notes[1]


def test_a_flash_attn_style_signature_names_the_layout_and_the_type_errors():
    def flash_like(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1)):
        return q

    notes = signature_notes(flash_like)
    text = "\n".join(notes)
    assert "takes `causal`, not torch SDPA's `is_causal`" in text
    assert "takes `softmax_scale`, not torch SDPA's `scale`" in text
    assert "a call with `is_causal` raises TypeError" in text  # no **kwargs: the probes decline those cases
    assert "[B, L, H, D]" in text and "[B, H, L, D]" in text


def test_only_kwargs_lists_every_keyword_the_harness_passes():
    def attention(q, k, v, **options):
        return q

    (note,) = signature_notes(attention)
    assert "`attn_mask`, `is_causal`, `scale`, `enable_gqa` are not named" in note and "`**options`" in note


def test_the_adapter_carries_the_notes_with_its_results(tmp_path, monkeypatch):
    (tmp_path / "own_names.py").write_text(OWN_NAMES)
    adapter = load_impl(f"{tmp_path / 'own_names.py'}:attention")
    assert adapter.signature_notes == signature_notes(adapter.fn)
    from attention_conformance.cases import catalog
    from attention_conformance.cases.inputs import make_inputs

    case = catalog.select(catalog.cases("ci"), "causal_alignment and q33k1 and f16")[0]
    out = adapter.forward(make_inputs(case), case, "cpu")
    assert out.notes[:2] == adapter.signature_notes


def _subprocess(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_both_front_ends_print_the_notes_and_each_failure_repeats_them(tmp_path):
    (tmp_path / "own_names.py").write_text(OWN_NAMES)
    impl = "./own_names.py:attention"
    r = _subprocess(["-m", "attention_conformance", "run", "--profile", "ci", "--impl", impl, "-k",
                     "causal_alignment and f16", "--report-dir", "rep"], tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"note: {impl}: the function takes `causal`, not torch SDPA's `is_causal`" in r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    fails = md.count("\n### FAIL: ")
    assert fails > 0 and md.count("- note: the function takes `causal`") == fails, md[-3000:]

    p = _subprocess(["-m", "pytest", "-p", "no:cacheprovider", "-q", "--pyargs", "attention_conformance", "--impl",
                     impl, "--profile", "ci", "-k", "causal_alignment and f16"], tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-3000:]
    assert "conformance: notes on the implementations under test" in out
    failures = out.split("short test summary info")[0]  # with CI set, pytest repeats each text in the summary
    assert failures.count("\nnote: the function takes `causal`") == failures.count("\nFAIL: ") > 0, out[-3000:]
