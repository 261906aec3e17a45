"""The wheel is the product: code, the contract documents and the CUDA sources the build compiles; no run output, no
lab script, no design record (those stay in the repository: reports/, tools/, docs/)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = "attention_conformance/"
#: the Markdown the wheel ships: the contract (oracles/SEMANTICS.md, conformance/TOLERANCES.md, conformance/README.md)
CONTRACT = {PKG + "oracles/SEMANTICS.md", PKG + "TOLERANCES.md", PKG + "README.md"}
#: what a run writes and the lab keeps (data, logs, pictures, scripts)
RUN_OUTPUT = (".json", ".jsonl", ".gz", ".html", ".png", ".svg", ".csv", ".log", ".txt", ".npz", ".sh", ".tgz")


@pytest.fixture(scope="module")
def names(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist() if n.startswith(PKG)]


def test_the_only_documents_are_the_contract(names):
    docs = {n for n in names if n.endswith(".md")}
    assert docs == CONTRACT, f"Markdown in the wheel besides the contract: {sorted(docs - CONTRACT)}"


def test_no_run_output_or_lab_script(names):
    bad = [n for n in names if n.endswith(RUN_OUTPUT)]
    assert not bad, f"run output or lab scripts in the wheel: {bad}"
    for folder in ("reports/", "tools/", "docs/", "tests/"):
        assert not [n for n in names if n.startswith(PKG + folder)], f"{folder} is not part of the product"


def test_every_file_is_code_a_contract_document_or_a_kernel_source(names):
    kinds = (".py", ".cu", ".cuh", ".h")
    other = [n for n in names if not n.endswith(kinds) and n not in CONTRACT]
    assert other == [PKG + "expectations.toml"], other


def test_what_the_product_needs_is_in_it(names):
    for module in ("kernels/check/forward.py", "kernels/check/backward.py", "kernels/check/fp8.py",
                   "kernels/check/verdict.py", "adapters/cudnn_fp8_timed.py", "reporting/fp8_accuracy.py",
                   "kernels/cuda/include/attn_params.h", "kernels/cuda/fa3_fwd.cu"):
        assert PKG + module in names, module


def test_every_lab_tool_stays_out(names):
    """Each script of tools/ is absent from the wheel under any name."""
    tools = {p.name for p in (ROOT / "tools").iterdir() if p.suffix in (".py", ".sh")}
    shipped = {n.rsplit("/", 1)[-1] for n in names}
    assert tools and not tools & shipped, sorted(tools & shipped)
