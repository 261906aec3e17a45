"""tools/sass_spills.py: parsing nvdisasm's text, spills by source line, straight-line regions."""

from __future__ import annotations

import sass_spills

SASS = """
//--------------------- .text._Z6kernelv --------------------------
        .type           _Z6kernelv,@function
_Z6kernelv:
.text._Z6kernelv:
        //## File "/repo/kernels/cuda/include/hopper/../mask.cuh", line 95
        /*0000*/                   STL [R1], R2 ;
        /*0010*/                   USETMAXREG.DEALLOC.CTAPOOL 0x18 ;
        //## File "/repo/kernels/cuda/include/hopper/bwd_mainloop.cuh", line 393
        /*0020*/                   MUFU.EX2 R3, R4 ;
        /*0030*/                   LDL R2, [R1] ;
        /*0040*/              @P0  BRA `(.L_x_1) ;
        /*0050*/                   F2FP.BF16.F32.PACK_AB R5, R3, R2 ;
        /*0060*/                   BRA `(.L_x_2) ;
.L_x_1:
        //## File "/repo/kernels/cuda/include/hopper/ptx.cuh", line 18
        /*0070*/                   HGMMA.64x80x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0080*/                   EXIT ;
_Z5cleanv:
        /*0000*/                   EXIT ;
"""


def test_parse_reads_functions_instructions_and_source_lines():
    funcs = sass_spills.parse(SASS)
    assert [f.name for f in funcs] == ["_Z6kernelv", "_Z5cleanv"]
    k = funcs[0]
    assert len(k.instrs) == 9 and k.instrs[4].predicated and k.instrs[4].opcode == "BRA"
    assert k.instrs[2].src == ("/repo/kernels/cuda/include/hopper/bwd_mainloop.cuh", 393)


def test_spills_by_line_and_regions():
    k = sass_spills.parse(SASS)[0]
    assert sass_spills.spills_by_line(k) == {("mask.cuh", 95, "STL"): 1, ("hopper/bwd_mainloop.cuh", 393, "LDL"): 1}
    rs = sass_spills.regions(k)
    # before USETMAXREG; up to the unpredicated BRA (the predicated one does not end a region); up to EXIT
    assert [(r.first, r.last) for r in rs] == [(0x0, 0x0), (0x10, 0x60), (0x70, 0x80)]
    assert rs[1].classes == {"EX2": 1, "LDL": 1, "F2FP": 1} and rs[2].classes == {"HGMMA": 1}


def test_report_lists_only_functions_that_spill():
    text = sass_spills.report(sass_spills.parse(SASS), min_instrs=1)
    assert "## _Z6kernelv" in text and "_Z5cleanv" not in text
    assert "| mask.cuh:95 | 1 | 0 |" in text
    assert sass_spills.report(sass_spills.parse(SASS), pattern="clean") == "no function spills\n"
