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
