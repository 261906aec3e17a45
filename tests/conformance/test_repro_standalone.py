"""``repro --standalone``: the written file stands alone and says what the harness says.

The file's parts are held to the harness's own code: its ``make_inputs()`` gives the harness's inputs bit for bit
(digest) over one case of every input recipe, its float64 ``reference_attention`` gives the oracle's values, and on
CPU its exit status agrees with the harness's verdict (1 for FAIL and for NaN findings, 0 for PASS). Files for the
CUDA families cannot run here: they compile, lint clean (undefined names included), regenerate their inputs, and exit
2 with "needs CUDA". Cases and adapters the writer cannot write are usage errors (exit 2, one line).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import math
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from attention_conformance import cli, oracles
from attention_conformance.adapters.registry import load
from attention_conformance.cases import catalog
from attention_conformance.cases.case import DISTRIBUTIONS
from attention_conformance.cases.inputs import make_inputs, round_to_dtype
from attention_conformance.reproduce import source as repro_source
from attention_conformance.reproduce.calls import claim_reason
from attention_conformance.reproduce.inputs import UnwritableCase, harness_arrays, inputs_source
from attention_conformance.reproduce.standalone import standalone

torch = pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CI = {c.id: c for c in catalog.cases("ci")}


def _writable(case) -> bool:
    return case.kv_append is None and (case.fp8 is None or (case.fp8.granularity == "per_tensor"
                                                            and not case.fp8.incoherent))


def _smallest(pred, limit=2e5, spec=None, device="cpu"):
    """The smallest writable ci case with `pred` (that adapter `spec` claims on `device`, when given)."""
    adapter = None if spec is None else load(spec, device).adapter
    found = sorted((c for c in CI.values() if _writable(c) and pred(c) and c.B * c.Hq * c.Lq * c.Lk <= limit),
                   key=lambda c: (c.B * c.Hq * c.Lq * c.Lk, c.id))
    return next((c for c in found if adapter is None or claim_reason(adapter, spec, c, device)[0] is None), None)


def _recipe_cases():
    """One small case of every input recipe the writer writes (distributions, masks, biases, layouts, sinks, FP8)."""
    preds = {f"dist-{d}": (lambda c, d=d: c.distribution == d) for d in
             DISTRIBUTIONS}
    preds.update({f"mask-{m}": (lambda c, m=m: c.mask == m) for m in
                  ("random", "random_heads", "full_rows", "key_padding", "none_visible")})
    preds.update({f"bias-{b}": (lambda c, b=b: c.bias == b) for b in ("random", "alibi", "neg_inf_rows")})
    preds.update({f"layout-{x}": (lambda c, x=x: c.layout == x) for x in ("bshd", "kv_broadcast", "paged64")})
    preds.update({f"sinks-{s}": (lambda c, s=s: c.sinks == s) for s in ("small", "large", "very_negative")})
    preds.update({
        "worked": lambda c: c.distribution.startswith("worked:"), "bf16": lambda c: c.dtype == "bfloat16",
        "dlse": lambda c: c.lse_grad, "fp8": lambda c: c.fp8 is not None and c.fp8.granularity == "per_tensor"
        and not c.fp8.incoherent, "varlen-bwd": lambda c: c.varlen and c.backward,
        "paged-varlen": lambda c: c.layout.startswith("paged") and c.seqlens_k is not None,
    })
    out = {}
    for name, pred in preds.items():
        case = _smallest(pred, limit=5e5)
        if case is not None:
            out[name] = case
    return out


RECIPES = _recipe_cases()


def _namespace() -> dict:
    return {"np": np, "math": math, **{n: getattr(repro_source, n) for n in dir(repro_source)}}


@pytest.mark.parametrize("case", list(RECIPES.values()), ids=list(RECIPES))
def test_make_inputs_gives_the_harness_inputs(case):
    ns = _namespace()
    exec(inputs_source(case), ns)
    mine = ns["make_inputs"]()
    theirs = harness_arrays(make_inputs(case))
    assert sorted(mine) == sorted(theirs)
    assert repro_source.input_digest(mine) == repro_source.input_digest(theirs)


def test_input_digest_sees_one_changed_value():
    case = RECIPES["dist-normal"]
    arrays = harness_arrays(make_inputs(case))
    before = repro_source.input_digest(arrays)
    arrays["k"] = arrays["k"].copy()
    arrays["k"].flat[7] = np.nextafter(arrays["k"].flat[7], np.inf)
    assert repro_source.input_digest(arrays) != before


def test_round_to_rounds_once_from_float64():
    """Ties are broken on the float64 value, as the harness's `round_to_dtype` breaks them, not after a detour through
    float32 (torch's conversion, and some ml_dtypes versions' cast)."""
    x = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 3.0e-41, 0.0, -1e-45, np.nan, 1e4, 3.3961e38])
    for dtype in ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"):
        got = repro_source.round_to(x, dtype)
        assert np.array_equal(got, round_to_dtype(x, dtype), equal_nan=True), dtype
    assert repro_source.round_to(x[:2], "bfloat16").tolist() == [1 + 2**-7, -(1 + 2**-7)]


def test_the_worst_element_line_names_a_finite_one():
    """The comparison's worst-element line is about the finite values: beside a NaN/Inf line it never reports an
    infinite observation as "0, within" (as the standalone repro of a +inf LSE once printed), and with nothing finite
    left it is left out."""
    expected = np.array([0.5, 1.0, 2.0])
    tol = np.full(3, 1e-3)
    defect, lines = repro_source.check_values("lse", expected, np.array([np.inf, 1.0, 2.01]), tol, True)
    assert defect and "1 of 3 compared values are NaN/Inf" in lines[0]
    assert "lse[2]" in lines[1] and "observed 2.01" in lines[1] and "EXCEEDED" in lines[1]
    defect, lines = repro_source.check_values("lse", expected[:1], np.array([np.inf]), tol[:1], True)
    assert defect and len(lines) == 1 and "NaN/Inf" in lines[0]
    defect, lines = repro_source.check_values("out", expected, expected.copy(), tol, True)
    assert not defect and "within" in lines[0]


EXPECTED = [c for c in (
    _smallest(lambda c: c.window is not None and c.causal),
    _smallest(lambda c: c.chunk is not None),
    _smallest(lambda c: c.softcap is not None and c.backward),
    _smallest(lambda c: c.bias == "neg_inf_rows"),
    _smallest(lambda c: c.mask == "full_rows" and c.backward),
    _smallest(lambda c: c.sinks == "large" and c.backward and c.lse_grad),
    _smallest(lambda c: c.varlen and c.backward and c.Hq != c.Hkv),
    _smallest(lambda c: c.causal and c.alignment == "top_left" and c.Lq != c.Lk),
) if c is not None]


@pytest.mark.parametrize("case", EXPECTED, ids=lambda c: c.id)
def test_reference_attention_is_the_oracle(case):
    inp = make_inputs(case)
    kw = dict(case.oracle_kwargs, mask=inp.mask, bias=inp.bias)
    if inp.sinks is not None:
        kw["sinks"] = inp.sinks
    out, lse = oracles.attention(inp.q, inp.k, inp.v, **kw)
    want = {"out": out, "lse": lse}
    if case.backward:
        g = oracles.attention_backward(inp.q, inp.k, inp.v, inp.dout, dlse=inp.dlse, **kw)
        want.update(dq=g[0], dk=g[1], dv=g[2], **({"dsinks": g[3]} if inp.sinks is not None else {}))
    got = repro_source.reference_attention(
        inp.q, inp.k, inp.v, scale=case.scale, causal=case.causal, alignment=case.alignment, window=case.window,
        chunk=case.chunk, softcap=case.softcap, mask=inp.mask, bias=inp.bias, seqlens_q=case.seqlens_q,
        seqlens_k=case.seqlens_k, sinks=inp.sinks, dout=inp.dout if case.backward else None,
        dlse=inp.dlse if case.backward else None)
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        rows = repro_source.compared(name, ref.shape, case.seqlens_q, case.seqlens_k)
        rows = np.broadcast_to(rows, ref.shape)
        a, b = got[name][rows], ref[rows]
        assert np.array_equal(np.isfinite(a), np.isfinite(b)) and np.array_equal(a[~np.isfinite(a)],
                                                                                   b[~np.isfinite(b)]), name
        fin = np.isfinite(b)
        assert np.allclose(a[fin], b[fin], rtol=1e-11, atol=1e-11 * max(1.0, np.abs(b[fin]).max(initial=0))), name


def _load(text: str) -> types.ModuleType:
    mod = types.ModuleType("standalone_repro")
    exec(compile(text, "standalone_repro.py", "exec"), mod.__dict__)
    return mod


def _run(mod: types.ModuleType) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = mod.main()
    return rc, out.getvalue()


def _imports(text: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    return names


def test_the_copied_source_imports_nothing_from_this_package():
    with open(repro_source.__file__, encoding="utf-8") as f:
        imported = _imports(f.read())
    assert not [m for m in imported if m.split(".")[0] in ("attention_conformance", "conformance", "oracles")]


def _pairs(device, wanted):
    return [(spec, case) for spec, pred in wanted
            if (case := _smallest(pred, spec=spec, device=device)) is not None]


GOOD = "attention_conformance.examples.good_sdpa:attention"
BROKEN = "attention_conformance.examples.broken_sdpa:attention"
BROKEN_FILE = os.path.join(ROOT, "conformance", "examples", "broken_sdpa.py") + ":attention"

# (spec, case) on CPU: the file's exit status is the harness's verdict (PASS -> 0, FAIL / NaN FINDING -> 1)
CPU_PAIRS = _pairs("cpu", [
    ("torch-sdpa-math@causal_lower_right", lambda c: c.causal and c.Lq > c.Lk),
    ("torch-sdpa-math@bool_mask", lambda c: c.chunk is not None),
    ("torch-sdpa-flash", lambda c: c.backward and c.bias == "random"),
    ("torch-sdpa-math", lambda c: c.layout == "kv_broadcast" and c.backward),
    ("torch-flex", lambda c: c.softcap is not None and c.mask is not None),
    ("torch-flex", lambda c: c.distribution == "nan_padding"),
    # plain SDPA-signature functions (--impl module:attr / file.py:attr): the file imports them as the harness did
    (GOOD, lambda c: c.backward and c.Hq != c.Hkv),
    (GOOD, lambda c: c.bias is not None and c.backward),
    (GOOD, lambda c: c.causal and c.Lq > c.Lk and c.mask is not None),
    (BROKEN, lambda c: c.Lk % 64 == 1 and c.Lk > 1),
    (BROKEN_FILE, lambda c: c.Lk % 64 == 1 and c.causal),
])


@pytest.mark.parametrize("spec,case", CPU_PAIRS, ids=[f"{s.replace(ROOT + os.sep, '')}-{c.id}" for s, c in CPU_PAIRS])
def test_cpu_file_exits_as_the_harness_judges(spec, case):
    assert load(spec, "cpu").adapter.supports(case, "cpu") is None
    text = standalone(case, spec, "cpu")
    assert not [m for m in _imports(text) if m.startswith("attention_conformance")]
    rc, out = _run(_load(text))
    verdict = _verdict(spec, case, "cpu")
    assert rc == (1 if verdict.outcome in ("FAIL", "FINDING") else 0), (verdict.outcome, verdict.message, out)
    assert ("DEFECT" in out) == (rc == 1), out
    if spec in (BROKEN, BROKEN_FILE):  # the example's tail-tile bug (Lk % 64 == 1): the file shows it
        assert verdict.outcome == "FAIL" and rc == 1, (verdict.outcome, out)


def test_a_plain_function_file_says_when_it_cannot_import_the_function(tmp_path):
    """The function's file gone (or its module off sys.path): exit 2 naming it, not a defect."""
    target = tmp_path / "kernel.py"
    target.write_text("from attention_conformance.examples.good_sdpa import attention  # noqa: F401\n")
    case = _smallest(lambda c: c.mask == "random" and not c.backward)
    text = standalone(case, f"{target}:attention", "cpu")
    assert _run(_load(text))[0] == 0
    target.unlink()
    rc, out = _run(_load(text))
    assert rc == 2 and f"cannot import the function under test {target}:attention" in out, out


# (spec, case) for the CUDA families: every FA4 spelling, sinks with a backward and dlse, paged K/V, compiled flex with
# a backward, SDPA's float mask with a backward, a CausalBias spelling, cuDNN's FP8 graph, FA3 FP8 and paged, FA2
GPU_PAIRS = _pairs("cuda", [
    ("flash-attn-4", lambda c: c.sinks == "large" and c.backward and c.lse_grad),
    ("flash-attn-4@varlen_func", lambda c: c.varlen and c.backward),
    ("flash-attn-4@seqused", lambda c: c.distribution == "nan_padding"),
    ("flash-attn-4@paged", lambda c: c.seqlens_k is not None),
    ("flash-attn-4@deterministic", lambda c: c.softcap is not None and c.window is not None),
    ("torch-flex", lambda c: c.backward and c.varlen),
    ("torch-flex", lambda c: c.chunk is not None and c.mask is not None),
    ("torch-sdpa-cudnn", lambda c: c.bias is not None and c.backward),
    ("torch-sdpa-efficient@causal_lower_right", lambda c: c.Lq < c.Lk),
    ("cudnn-fp8", lambda c: c.causal),
    ("flash-attn-3", lambda c: c.fp8 is not None),
    ("flash-attn-3@with_kvcache_paged", lambda c: True),
    ("flash-attn-2@varlen_func", lambda c: c.backward),
])


@pytest.fixture(scope="module")
def gpu_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("standalone")
    files = {}
    for spec, case in GPU_PAIRS:
        path = folder / f"{spec.replace('@', '_')}-{case.id}.py"
        path.write_text(standalone(case, spec, "cuda"))
        files[(spec, case.id)] = path
    return files


def test_cuda_files_lint_clean(gpu_files):
    """Undefined names, unused imports, long lines: what cannot be run here is at least checked statically."""
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (the lint extra)")
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                        os.path.join(ROOT, "pyproject.toml"), *map(str, gpu_files.values())],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")
@pytest.mark.parametrize("spec,case", GPU_PAIRS, ids=[f"{s}-{c.id}" for s, c in GPU_PAIRS])
def test_cuda_file_makes_its_inputs_and_exits_2_without_cuda(spec, case, gpu_files):
    text = gpu_files[(spec, case.id)].read_text()
    assert not [m for m in _imports(text) if m.startswith("attention_conformance")]
    mod = _load(text)
    assert mod.DEVICE == "cuda" and mod.input_digest(mod.make_inputs()) == mod.INPUTS_SHA256
    rc, out = _run(mod)
    assert rc == 2 and "needs CUDA" in out, out


def _verdict(spec, case, device):
    """The harness's verdict on (`spec`, `case`) on `device`, in this process (the engine's calls, the judge)."""
    from attention_conformance.running.worker import call_adapter, collect_calls
    from attention_conformance.verdict.bounds import compute_oracle
    from attention_conformance.verdict.judge import judge

    adapter = load(spec, device).adapter
    inputs = make_inputs(case)
    calls = collect_calls(lambda kind: call_adapter(adapter, kind, inputs, case, device), case, repeat=False)
    return judge(case, compute_oracle(case, inputs), calls, device=device, capabilities=adapter.capabilities)


@pytest.mark.gpu
@pytest.mark.parametrize("spec,case", GPU_PAIRS, ids=[f"{s}-{c.id}" for s, c in GPU_PAIRS])
def test_cuda_file_exits_as_the_harness_judges(spec, case, gpu_files):
    """On a CUDA runner: the file's exit status is the harness's verdict (FAIL / FINDING -> 1, PASS -> 0; a library
    that is not installed, or that declines the case, skips)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    loaded = load(spec, "cuda")
    if not loaded.available or loaded.adapter.supports(case, "cuda"):
        pytest.skip(f"{spec} on this machine: {loaded.reason or loaded.adapter.supports(case, 'cuda')}")
    rc, out = _run(_load(gpu_files[(spec, case.id)].read_text()))
    verdict = _verdict(spec, case, "cuda")
    if verdict.outcome == "NOT_SUPPORTED":
        assert rc == 2, (verdict.message, out)
        return
    assert rc == (1 if verdict.outcome in ("FAIL", "FINDING", "CRASH") else 0), (verdict.outcome, verdict.message, out)


def _cli(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(["repro", *args])
    got = capsys.readouterr()
    return rc, got.out, got.err


@pytest.mark.parametrize("args,words", [
    (("--impl", "cuda-fa2"), "this project's own kernel"),
    (("--impl", "reference-fa2"), "this project's own kernel"),
    (("--impl", "attention_conformance.adapters.torch_sdpa:SdpaMath"), "an adapter object's call is its own code"),
    (("--impl", "flash-attn-4", "--device", "cpu"), "runs on cuda, not cpu"),
    (("--impl", "torch-sdpa-flash@is_causal"), "declines case"),
    (("--impl", "torch-sdpa-mth"), "unknown adapter"),
])
def test_what_it_cannot_write_is_a_usage_error(capsys, args, words):
    case = _smallest(lambda c: c.mask == "random" and not c.backward and c.dtype == "float16")
    rc, out, err = _cli(capsys, case.id, *args, "--standalone")
    assert rc == 2 and not out and words in err and len(err.strip().splitlines()) == 1, err


def test_unwritable_case_features_are_named():
    case = next(c for c in catalog.cases("full") if c.kv_append is not None)
    with pytest.raises(UnwritableCase, match="KV-cache append"):
        standalone(case, "torch-sdpa-math", "cpu")


def test_out_needs_standalone_and_writes_the_file(capsys, tmp_path):
    case = RECIPES["dist-normal"]
    rc, _, err = _cli(capsys, case.id, "--out", str(tmp_path / "x.py"))
    assert rc == 2 and "--out needs --standalone" in err
    target = tmp_path / "repro.py"
    rc, out, err = _cli(capsys, case.id, "--impl", "torch-sdpa-math", "--standalone", "--out", str(target))
    assert rc == 0 and not out and str(target) in err
    text = target.read_text()
    flat = " ".join(text.replace("\\\n", " ").split())
    assert f"repro {case.id} --impl torch-sdpa-math --standalone --out {target}" in flat  # the command, recorded
    compile(text, str(target), "exec")
