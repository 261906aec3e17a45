"""The installed distribution owns one top-level import name, ``attention_conformance``.

Other PyPI distributions own ``kernels`` (Hugging Face's hub-kernel loader, which transformers imports),
``reports`` and ``conformance``; installing this project next to them must shadow none of them. The test
installs our wheel (tests/packaging/conftest.py builds it) beside Hugging Face's ``kernels`` into one fresh virtual
environment and imports both. It needs the package index (CI has it); without one it fails with pip's own message.
"""

from __future__ import annotations

import sys
import zipfile


def test_the_wheel_installs_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/", 1)[0] for n in z.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"attention_conformance"}, sorted(tops)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for sub in ("oracles", "kernels", "property_tests", "adapters"):
        assert f"attention_conformance/{sub}/__init__.py" in names, sub
    assert "attention_conformance/oracles/SEMANTICS.md" in names
    assert "attention_conformance/kernels/cuda/include/attn_params.h" in names


def test_installs_beside_huggingface_kernels(wheel, tmp_path, run_ok):
    env = tmp_path / "env"
    run_ok([sys.executable, "-m", "venv", str(env)])
    py = env / "bin" / "python"
    run_ok([str(py), "-m", "pip", "install", "-q", str(wheel), "kernels"])
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
    r = run_ok([str(py), "-c", probe], cwd=tmp_path)
    assert r.stdout.startswith("ok"), r.stdout
