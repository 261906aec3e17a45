"""The PTX comparison's name normaliser (kernels/cuda/ptx_diff.py): a namespace move normalises away,
nothing else does. Needs c++filt only (no nvcc)."""

from __future__ import annotations

import shutil

import pytest

from attention_conformance.kernels.cuda.ptx_diff import DEFAULT_RENAMES, normalise

pytestmark = pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt not found")

RENAMES = [tuple(r.split("=", 1)) for r in DEFAULT_RENAMES]


def test_namespace_move_normalises_to_the_same_lines() -> None:
    old = (".visible .entry _ZN8attn_bwd17bwd_dsinks_kernelILi256EEEv13AttnBwdParams(\n"
           "\t.param .align 8 .b8 _ZN8attn_bwd17bwd_dsinks_kernelILi256EEEv13AttnBwdParams_param_0[456]\n"
           ".extern .shared .align 16 .b8 _ZN8attn_fa14smemE[];\n")
    new = (".visible .entry _ZN4attn3bwd17bwd_dsinks_kernelILi256EEEv13AttnBwdParams(\n"
           "\t.param .align 8 .b8 _ZN4attn3bwd17bwd_dsinks_kernelILi256EEEv13AttnBwdParams_param_0[456]\n"
           ".extern .shared .align 16 .b8 _ZN4attn3fa14smemE[];\n")
    assert normalise(old, RENAMES) == normalise(new, [])
    assert normalise(new, [])[1].endswith(">_param_0[456]")


def test_anything_else_still_differs() -> None:
    a = "\tmov.b64 %rd1, _ZN4attn3bwd3fooILi64EEEvv;\n\tex2.approx.ftz.f32 %f1, %f2;\n"
    assert normalise(a, []) != normalise(a.replace("ILi64E", "ILi128E"), [])  # another instantiation
    assert normalise(a, []) != normalise(a.replace("%f2", "%f3"), [])  # another operand
    assert normalise(a.replace("attn3bwd", "attn3fa1"), []) != normalise(a, [])  # another namespace


KERNEL = """\
\t// .globl\t{name}
.visible .entry {name}(
\t.param .align 8 .b8 {name}_param_0[280]
)
{{
\tld.param.u32 %r1, [{name}_param_0+8];
$L__BB{i}_1:
\tsetp.eq.s32 %p1, %r1, {k};
\t@%p1 bra $L__BB{i}_1;
WAIT_{w}:
\tbra WAIT_{w};
\tret;
}}
"""


def _ptx(*kernels: tuple[str, int, int, int]) -> str:
    return ".version 9.0\n.target sm_90a\n" + "".join(KERNEL.format(name=n, i=i, k=k, w=w) for n, i, k, w in kernels)


def test_a_renamed_or_reordered_kernel_matches_its_base_body() -> None:
    """A kernel's own name (a configuration type renamed), its place in the file (the function index of its branch
    labels) and the numbering of its inline assembly's labels do not make it differ."""
    from attention_conformance.kernels.cuda.ptx_diff import entries, match_kernels

    old = _ptx(("_Z3fooILi1EEvv", 0, 7, 1286), ("_Z3barv", 1, 9, 1300))
    new = _ptx(("_Z3bazv", 0, 9, 5), ("_Z3quxILb1EEvv", 1, 7, 152))  # bar renamed, foo renamed and moved
    found, unmatched = match_kernels({"a.cu": entries(old)}, {"a.cu": entries(new)}, [])
    assert found == {("a.cu", "_Z3bazv"): ("a.cu", "_Z3barv"), ("a.cu", "_Z3quxILb1EEvv"): ("a.cu", "_Z3fooILi1EEvv")}
    assert unmatched == set()


def test_a_changed_body_has_no_base_kernel() -> None:
    from attention_conformance.kernels.cuda.ptx_diff import entries, match_kernels

    found, unmatched = match_kernels({"a.cu": entries(_ptx(("_Z3foov", 0, 7, 1)))},
                                     {"a.cu": entries(_ptx(("_Z3foov", 0, 8, 1)))}, [])
    assert found == {("a.cu", "_Z3foov"): None} and unmatched == {("a.cu", "_Z3foov")}


def test_translation_unit_hashes_normalise_away() -> None:
    a = "\tmov.u32 %r1, _ZN40_INTERNAL_29a35cbf_11_hadamard_cu_1914bbd54smaxE;\n"
    b = a.replace("29a35cbf", "b0cf6a14")
    assert normalise(a, []) == normalise(b, []) and normalise(a, []) != normalise(a.replace("smax", "smin"), [])
