"""tools/tox_runner_site.py: a runner's torch in a virtual environment made visible to ``tox -e gpu``."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "tools" / "tox_runner_site.py"
_spec = importlib.util.spec_from_file_location("tox_runner_site", _PATH)
trs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trs)


def _fake_python(folder: Path, *, torch_dirs: list[str] | None) -> None:
    """A ``python3`` that answers the probe like an interpreter with (or without) torch."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "python3"
    if torch_dirs is None:
        exe.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    else:
        said = json.dumps({"torch": "2.11.0+cu130", "cuda": "13.0", "dirs": torch_dirs})
        exe.write_text(f"#!/bin/sh\necho '{said}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_links_the_first_python_on_the_path_that_imports_torch(tmp_path):
    site = tmp_path / "toxenv-site"
    site.mkdir()
    venv_site = tmp_path / "opt-torch-venv-site"
    venv_site.mkdir()
    _fake_python(tmp_path / "a", torch_dirs=None)  # the system python, no torch
    _fake_python(tmp_path / "b", torch_dirs=[str(venv_site), str(tmp_path / "missing")])
    path = os.pathsep.join(str(tmp_path / x) for x in ("a", "b"))
    code, said = trs.link(path, site, torch_here=False)
    assert code == 0, said
    assert (site / trs.PTH_NAME).read_text() == f"{venv_site}\n"  # existing directories only
    assert "2.11.0+cu130" in said and str(tmp_path / "b" / "python3") in said


def test_nothing_to_do_where_torch_is_already_importable(tmp_path):
    code, said = trs.link(str(tmp_path), tmp_path, torch_here=True)
    assert code == 0 and "nothing to link" in said and not (tmp_path / trs.PTH_NAME).exists()


def test_fails_naming_what_it_tried_when_no_python_has_torch(tmp_path):
    _fake_python(tmp_path / "a", torch_dirs=None)
    code, said = trs.link(str(tmp_path / "a"), tmp_path, torch_here=False)
    assert code == 1 and "No module named 'torch'" in said and str(tmp_path / "a" / "python3") in said


def test_the_pycache_an_earlier_regular_install_left_is_removed(tmp_path):
    """A tox env made before tox.ini installed the checkout editable keeps site-packages/attention_conformance with
    pytest's rewritten modules in __pycache__ folders: a namespace package that hides the editable install."""
    left = tmp_path / "attention_conformance" / "adapters" / "__pycache__"
    left.mkdir(parents=True)
    (left / "registry.cpython-311-pytest-9.2.0.pyc").write_bytes(b"")
    assert trs.remove_leftover(tmp_path) and not (tmp_path / "attention_conformance").exists()
    assert not trs.remove_leftover(tmp_path)  # nothing there: nothing to do
    installed = tmp_path / "attention_conformance"
    installed.mkdir()
    (installed / "__init__.py").write_text("")
    assert not trs.remove_leftover(tmp_path) and installed.exists()  # a regular install stays
    (installed / "__init__.py").unlink()
    (installed / "data.toml").write_text("")
    assert not trs.remove_leftover(tmp_path) and installed.exists()  # a file that is not bytecode: not ours to remove
