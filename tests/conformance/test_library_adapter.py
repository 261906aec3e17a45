"""`LibraryAdapter` (conformance/adapters/spelling.py): what a library logs while it is imported is kept for `list`,
not printed into every run (xformers warns at import on every machine where its C++/CUDA extensions do not load)."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys

import pytest

from attention_conformance.adapters.spelling import LibraryAdapter, logged


def test_logged_keeps_the_package_warnings_and_passes_the_rest(caplog):
    with caplog.at_level(logging.INFO), logged("noisy_pkg") as messages:
        logging.getLogger("noisy_pkg.sub").warning("cannot load   its\nextensions")
        logging.getLogger("noisy_pkg").info("below WARNING: not collected")
        logging.getLogger("other").warning("someone else's")
    assert messages == ["cannot load its extensions"]
    assert [r.getMessage() for r in caplog.records] == ["someone else's"]  # info went nowhere (propagation off)
    assert logging.getLogger("noisy_pkg").propagate and not logging.getLogger("noisy_pkg").handlers


def test_a_library_that_warns_at_import_is_quiet_and_list_shows_it(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "warns_at_import"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import logging\nlogging.getLogger('warns_at_import').warning("
                                     "'WARNING[LIB]: built for another torch')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Lib(LibraryAdapter):
        name = "warns"
        module_name = "warns_at_import"
        distribution = "warns-at-import"

        def forward(self, inputs, case, device):
            raise NotImplementedError

    adapter = Lib()
    try:
        assert adapter.module() is not None
    finally:
        sys.modules.pop("warns_at_import", None)
    captured = capsys.readouterr()
    assert "WARNING[LIB]" not in captured.err + captured.out
    assert adapter.import_messages == ["WARNING[LIB]: built for another torch"]


def test_a_run_on_a_machine_without_xformers_extensions_prints_no_xformers_warning():
    """The CLI in a fresh process (xformers not yet imported): its import warning is in `list`, not on stderr."""
    if importlib.util.find_spec("xformers") is None:
        pytest.skip("xformers is not installed (the xformers extra)")
    p = subprocess.run([sys.executable, "-m", "attention_conformance", "list"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "WARNING[XFORMERS]" not in p.stderr, p.stderr
    block = p.stdout.split("\nxformers ", 1)[1].split("\nflashinfer", 1)[0]
    assert "WARNING[XFORMERS]" not in p.stdout or "logged at import: WARNING[XFORMERS]" in block, block
