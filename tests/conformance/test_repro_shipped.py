"""Every shipped expectations entry points at a standalone repro file that reproduces it.

conformance/expectations.toml names, per entry, ``repro = "repros/ID.py"`` (written by ``repro --standalone``). Here:
the files exist and import nothing from this package; the CPU entries' files exit 1 on the torch the entry names
(skipped on another version); the CUDA entries' files exit 2 with "needs CUDA" without a device, and on a CUDA runner
(``pytest -m gpu tests/conformance/test_repro_shipped.py``) exit 1 where the entry's library version and GPU are
present. Also the ``repro`` key itself: validated to exist, carried into results and shown in reports.
"""

from __future__ import annotations

import ast
import contextlib
import io
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from attention_conformance.verdict import expectations
from attention_conformance.verdict.expectations import DEFAULT_FILE, ExpectationError, version_in

ENTRIES = expectations.load(DEFAULT_FILE)
CPU = [e for e in ENTRIES if e.devices == ("cpu",)]
CUDA = [e for e in ENTRIES if e.devices is not None and "cuda" in e.devices]


def _path(e) -> Path:
    return DEFAULT_FILE.parent / e.repro


def test_every_shipped_entry_has_a_repro_file():
    missing = [e.id for e in ENTRIES if not e.repro or not _path(e).is_file()]
    assert not missing, f"entries without a repro file: {missing}"
    assert {e.id for e in CPU} | {e.id for e in CUDA} == {e.id for e in ENTRIES}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_repro_file_imports_nothing_from_this_package(entry):
    tree = ast.parse(_path(entry).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not [m for m in imported if m.split(".")[0] in ("attention_conformance", "conformance", "oracles")]


def _exit_status(path: Path) -> tuple[int, str]:
    """Run the file as ``python3 path`` would (``__main__``), in this process: (exit status, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), pytest.raises(SystemExit) as stop:
        runpy.run_path(str(path), run_name="__main__")
    return int(stop.value.code or 0), out.getvalue()


def _torch_version() -> str:
    torch = pytest.importorskip("torch")
    return torch.__version__


@pytest.mark.parametrize("entry", CPU, ids=lambda e: e.id)
def test_cpu_repro_exits_1_on_the_torch_the_entry_names(entry):
    version = _torch_version()
    if not version_in(version, entry.versions):
        pytest.skip(f"torch {version} is outside the entry's versions {entry.versions}")
    status, out = _exit_status(_path(entry))
    assert status == 1 and "DEFECT" in out, out


@pytest.mark.parametrize("entry", CUDA, ids=lambda e: e.id)
def test_cuda_repro_exits_2_without_cuda(entry):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the behaviour without a CUDA device")
    status, out = _exit_status(_path(entry))
    assert status == 2 and "needs CUDA" in out, out


def _adapter_version(spec: str) -> str:
    from attention_conformance.adapters.registry import load

    loaded = load(spec, "cuda")
    return str(loaded.adapter.version()) if loaded.adapter is not None else ""


def _applies_here(entry, gpu: str, version: str) -> bool:
    """The run's own rule (`expectations.applicable`: adapter, device, GPU names, version) for the entry's first
    adapter on this CUDA runner."""
    spec = entry.adapters[0]
    ctx = expectations.RunContext(device="cuda", gpus=(gpu,), versions={spec: version})
    return expectations.applicable(entry, spec, spec, ctx)


def test_applies_here_matches_a_gpu_list_and_the_version():
    (entry,) = [e for e in CUDA if e.id == "fa4-sm90-nonpositive-scale"]
    assert entry.gpu == ("H100", "H200")
    assert _applies_here(entry, "NVIDIA H100 80GB HBM3", "4.0.0b36")
    assert _applies_here(entry, "NVIDIA H200", "4.0.0b36")
    assert not _applies_here(entry, "NVIDIA A100-SXM4-80GB", "4.0.0b36")
    assert not _applies_here(entry, "NVIDIA H200", "4.0.0")


@pytest.mark.gpu
@pytest.mark.parametrize("entry", CUDA, ids=lambda e: e.id)
def test_cuda_repro_exits_1_where_the_entry_applies(entry):
    """On a CUDA runner: a separate process, as a maintainer runs it. Skipped where the entry does not apply (another
    GPU or library version, by the rule a run applies: `expectations.applicable`) or the library is not installed;
    any other exit status 2 fails."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    gpu = torch.cuda.get_device_name()
    version = _adapter_version(entry.adapters[0])
    if not _applies_here(entry, gpu, version):
        pytest.skip(f"the entry (GPU {entry.gpu}, {entry.adapters[0]} {entry.versions}) does not apply to {gpu}, "
                    f"{entry.adapters[0]} {version or 'not installed'}")
    p = subprocess.run([sys.executable, str(_path(entry))], capture_output=True, text=True, timeout=900)
    if p.returncode == 2 and "cannot run here: needs " in p.stderr:
        pytest.skip(p.stderr.strip().splitlines()[-1])
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]


# -- the repro key ----------------------------------------------------------------------------------------------------
def _write(tmp_path: Path, repro: str) -> Path:
    path = tmp_path / "extra.toml"
    path.write_text(f'schema = 1\n[[expectation]]\nid = "x"\nadapters = ["torch-sdpa-math"]\nreason = "r"\n'
                    f'repro = "{repro}"\n')
    return path


def test_repro_key_names_a_file_beside_the_expectations_file(tmp_path):
    (tmp_path / "repros").mkdir()
    (tmp_path / "repros" / "x.py").write_text("")
    (entry,) = expectations.load(_write(tmp_path, "repros/x.py"))
    assert entry.repro == "repros/x.py" and entry.to_dict()["repro"] == "repros/x.py"
    with pytest.raises(ExpectationError, match=r"repro 'repros/y.py': no such file"):
        expectations.load(_write(tmp_path, "repros/y.py"))
    with pytest.raises(ExpectationError, match="relative to the expectations file"):
        expectations.load(_write(tmp_path, str(tmp_path / "repros" / "x.py")))


def test_reports_show_the_repro_beside_the_link():
    from attention_conformance.reporting.page import _expectations_html
    from attention_conformance.reporting.report import _expectation_lines
    from attention_conformance.running.engine import CaseResult

    e = ENTRIES[0]
    result = CaseResult("c", e.adapters[0], e.adapters[0], "KNOWN", "scale", [],
                        expectation={**e.to_dict(), "raw_outcome": "FAIL", "note": "", "matched": True})
    markdown = "\n".join(_expectation_lines({"expectations": {}}, [result]))
    html = "\n".join(_expectations_html({"results": [result.to_dict()], "expectations": {}}))
    assert f"repro: `{e.repro}`" in markdown and f"repro: <code>{e.repro}</code>" in html
