"""The installed distribution owns one top-level import name, ``attention_conformance``.

Other PyPI distributions own ``kernels`` (Hugging Face's hub-kernel loader, which transformers imports),
``reports`` and ``conformance``; installing this project next to them must shadow none of them. The test
builds our wheel, installs it beside Hugging Face's ``kernels`` into one fresh virtual environment and
imports both. It needs the package index (CI has it); without one it fails with pip's own message.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)])
    (whl,) = out.glob("attention_conformance-*.whl")
    return whl


def test_the_wheel_installs_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/", 1)[0] for n in z.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"attention_conformance"}, sorted(tops)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for sub in ("oracles", "kernels", "property_tests", "reports", "adapters"):
        assert f"attention_conformance/{sub}/__init__.py" in names, sub
    assert "attention_conformance/oracles/SEMANTICS.md" in names
    assert "attention_conformance/kernels/cuda/include/attn_params.h" in names


def test_installs_beside_huggingface_kernels(wheel, tmp_path):
    env = tmp_path / "env"
    _run([sys.executable, "-m", "venv", str(env)])
    py = env / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", str(wheel), "kernels"])
    probe = (
        "import importlib.metadata as m, kernels, attention_conformance.kernels as ours\n"
        "import attention_conformance.oracles as oracles\n"
        "assert m.distribution('kernels').locate_file('kernels/__init__.py').resolve() == "
        "__import__('pathlib').Path(kernels.__file__).resolve(), kernels.__file__\n"
        "assert 'attention_conformance' in ours.__file__, ours.__file__\n"
        "assert hasattr(kernels, 'get_kernel'), dir(kernels)\n"
        "assert callable(oracles.attention)\n"
        "print('ok', kernels.__file__, ours.__file__)\n"
    )
    r = _run([str(py), "-c", probe], cwd=tmp_path)
    assert r.stdout.startswith("ok"), r.stdout
