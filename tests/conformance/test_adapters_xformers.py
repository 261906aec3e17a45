"""The xformers adapter on the CPU, against a stand-in ``xformers.ops.fmha`` package.

xformers' kernels need CUDA, so these tests give the adapter a small package with xformers' public names: the
``attn_bias`` classes (each with the visibility its documentation gives it), ``Inputs``, operators with their
declared ``SUPPORTED_*`` attributes and ``not_supported_reasons``, the dispatcher, ``memory_efficient_attention``
(differentiable float64 torch, BMHK and BMGHK), ``memory_efficient_attention_partial`` and ``merge_attentions``.
The engine's judge compares the adapter's results with the FP64 oracle: a PASS means the translation (bias objects,
packed sequences, padded keys, dense bias tensors, GQA groups) says the case. Stand-ins with one semantic dropped
(`MUTANTS`) must FAIL. The kernels themselves are judged on the H200.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from adapter_helpers import file_status, in_process_runner, installed, small_cases, spread_pairs, standalone_on_cpu

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters import xformers as xf
from attention_conformance.adapters.base import capability_reason
from attention_conformance.adapters.spelling import causal_hides_nothing, equivalent_cases
from attention_conformance.cases.case import Case
from attention_conformance.running.engine import OracleCache
from attention_conformance.verdict.outcomes import FAIL, FINDING, NOT_SUPPORTED, PASS, QUALITY_WARNING

torch = pytest.importorskip("torch")


# -- the stand-in: attention biases ----------------------------------------------------------------------------------
def _intervals(lengths, padding=None):
    starts, at = [], 0
    for n in lengths:
        starts.append(at)
        at += padding if padding is not None else n
    return [(s, s + n) for s, n in zip(starts, lengths, strict=True)]


class _Bias:
    """Base of the stand-in biases: ``keep(Mq, Mk)`` is the [Mq, Mk] visibility (True = attend)."""

    mutant: str | None = None

    def keep(self, Mq, Mk):
        raise NotImplementedError


def _causal(Mq, Mk, shift, window=None):
    i = torch.arange(Mq)[:, None] + shift
    j = torch.arange(Mk)[None, :]
    keep = j <= i
    if window is not None:
        keep &= j > i - window
    return keep


class LowerTriangularMask(_Bias):
    def keep(self, Mq, Mk):
        return _causal(Mq, Mk, Mk - Mq if self.mutant == "top_left_is_bottom_right" else 0)


class LowerTriangularFromBottomRightMask(_Bias):
    def keep(self, Mq, Mk):
        return _causal(Mq, Mk, Mk - Mq)


class LowerTriangularFromBottomRightLocalAttentionMask(_Bias):
    def __init__(self, _window_size):
        if _window_size <= 0:
            raise ValueError(f"Expected `window_size > 0`, but window_size={_window_size}")
        self._window_size = _window_size

    def keep(self, Mq, Mk):
        return _causal(Mq, Mk, Mk - Mq, self._window_size)


class BlockDiagonalMask(_Bias):
    shift = None  # None: every key of the block; "top_left" / "bottom_right": causal in each block
    window = None

    def __init__(self, q_seqlen, kv_seqlen, padding=None):
        self.q_seqlen, self.kv_seqlen, self.padding = list(q_seqlen), list(kv_seqlen), padding

    @classmethod
    def from_seqlens(cls, q_seqlen, kv_seqlen=None, *, device=None):
        return cls(q_seqlen, q_seqlen if kv_seqlen is None else kv_seqlen)

    def make_local_attention(self, window_size):
        return BlockDiagonalCausalLocalAttentionMask(self.q_seqlen, self.kv_seqlen, window_size)

    def keep(self, Mq, Mk):
        keep = torch.zeros(Mq, Mk, dtype=torch.bool)
        pad = None if self.mutant == "ignore_kv_seqlen" else self.padding
        kv = [self.padding] * len(self.kv_seqlen) if pad is None and self.padding else self.kv_seqlen
        for (q0, q1), (k0, k1) in zip(_intervals(self.q_seqlen), _intervals(kv, self.padding), strict=True):
            nq, nk = q1 - q0, k1 - k0
            block = torch.ones(nq, nk, dtype=torch.bool)
            if self.shift is not None:
                block = _causal(nq, nk, nk - nq if self.shift == "bottom_right" else 0, self.window)
            keep[q0:q1, k0:k1] = block
        return keep


class BlockDiagonalCausalMask(BlockDiagonalMask):
    shift = "top_left"


class BlockDiagonalCausalFromBottomRightMask(BlockDiagonalMask):
    shift = "bottom_right"


class BlockDiagonalCausalLocalAttentionMask(BlockDiagonalMask):
    shift = "top_left"

    def __init__(self, q_seqlen, kv_seqlen, window_size):
        super().__init__(q_seqlen, kv_seqlen)
        self.window = window_size
        for q, k in zip(q_seqlen, kv_seqlen, strict=True):
            if q - window_size >= k:  # xformers' own check, in its words
                raise RuntimeError(f"No keys are attended in q_seqlen {q} k_seqlen {k} with sliding window "
                                   f"{window_size}")


class BlockDiagonalCausalWithOffsetPaddedKeysMask(BlockDiagonalMask):
    shift = "bottom_right"

    @classmethod
    def from_seqlens(cls, q_seqlen, kv_padding, kv_seqlen, causal_diagonal=None, *, device=None):
        return cls(q_seqlen, kv_seqlen, padding=kv_padding)


BIAS_CLASSES = (LowerTriangularMask, LowerTriangularFromBottomRightMask,
                LowerTriangularFromBottomRightLocalAttentionMask, BlockDiagonalMask, BlockDiagonalCausalMask,
                BlockDiagonalCausalFromBottomRightMask, BlockDiagonalCausalLocalAttentionMask,
                BlockDiagonalCausalWithOffsetPaddedKeysMask)


# -- the stand-in: operators and the dispatcher ----------------------------------------------------------------------
@dataclass
class Inputs:
    query: object
    key: object
    value: object
    attn_bias: object = None
    p: float = 0.0
    scale: float | None = None
    output_dtype: object = None
    is_partial: bool = False


def _op(name, dtypes, max_k, biases, *, dv_ne_d, bmghk, partial, built=True, align8=False, no_top_left=False):
    class Op:
        NAME = name
        SUPPORTED_DTYPES = set(dtypes)
        SUPPORTED_MAX_K = max_k
        SUPPORTED_ATTN_BIAS_TYPES = biases
        SUPPORTS_DIFFERENT_VALUE_EMBED = dv_ne_d
        SUPPORTS_BMGHK = bmghk
        SUPPORTS_PARTIAL = partial
        SUPPORTS_CUSTOM_SCALE = True
        VARLEN_LSE_PACKED = True

        @classmethod
        def not_supported_reasons(cls, d):
            r = [] if built else ["operator wasn't built - see `python -m xformers.info` for more info"]
            if d.query.dtype not in cls.SUPPORTED_DTYPES:
                r.append(f"dtype={d.query.dtype} (supported: {cls.SUPPORTED_DTYPES})")
            if type(d.attn_bias) not in cls.SUPPORTED_ATTN_BIAS_TYPES:
                r.append(f"attn_bias type is {type(d.attn_bias)}")
            if max(d.query.shape[-1], d.value.shape[-1]) > cls.SUPPORTED_MAX_K:
                r.append(f"max(query.shape[-1], value.shape[-1]) > {cls.SUPPORTED_MAX_K}")
            if d.query.ndim == 5 and not bmghk:
                r.append("operator does not support BMGHK format")
            if d.query.shape[-1] != d.value.shape[-1] and not dv_ne_d:
                r.append("query.shape[-1] != value.shape[-1]")
            if d.is_partial and not partial:
                r.append("Partial attention not supported")
            if align8 and d.query.shape[-1] % 8:
                r.append("query.shape[-1] % 8 != 0")
            top_left = ("LowerTriangularMask", "BlockDiagonalCausalMask", "BlockDiagonalCausalLocalAttentionMask")
            if no_top_left and type(d.attn_bias).__name__ in top_left and d.query.shape[1] != d.key.shape[1]:
                r.append("Only support causal mask from bottom-right when Mq != Mk")
            return r

    return Op


T = torch.Tensor
N = type(None)
FLASH_BW_NAMES = ("LowerTriangularMask", "LowerTriangularFromBottomRightMask",
                  "LowerTriangularFromBottomRightLocalAttentionMask", "BlockDiagonalMask", "BlockDiagonalCausalMask",
                  "BlockDiagonalCausalFromBottomRightMask", "BlockDiagonalCausalLocalAttentionMask")
CUTLASS_BW_NAMES = ("LowerTriangularMask", "LowerTriangularFromBottomRightMask", "BlockDiagonalMask",
                    "BlockDiagonalCausalMask", "BlockDiagonalCausalFromBottomRightMask",
                    "BlockDiagonalCausalLocalAttentionMask")


def make_xformers(mutant=None, biases=None):
    """The stand-in package: (xformers, xformers.ops, xformers.ops.fmha and its submodules). ``biases``: xformers'
    own ``attn_bias`` module (its classes and their ``materialize``) instead of the stand-in classes above."""
    fmha = types.ModuleType("xformers.ops.fmha")
    fmha.calls = []
    fmha.mutant = mutant
    _Bias.mutant = mutant
    if biases is None:
        ab = types.ModuleType("xformers.ops.fmha.attn_bias")
        for cls in BIAS_CLASSES:
            setattr(ab, cls.__name__, cls)
    else:
        ab = biases
    classes = tuple(getattr(ab, cls.__name__) for cls in BIAS_CLASSES)
    ALL = (N, T, *classes)
    FLASH_BW = (N, *(getattr(ab, n) for n in FLASH_BW_NAMES))
    common = types.ModuleType("xformers.ops.fmha.common")
    common.Inputs = Inputs
    ops = {
        "cutlass": (_op("cutlassF-pt", (torch.float16, torch.bfloat16, torch.float32), 65536,
                        ALL, dv_ne_d=True, bmghk=True, partial=False),
                    _op("cutlassB-pt", (torch.float16, torch.bfloat16, torch.float32), 65536,
                        (N, T, *(getattr(ab, n) for n in CUTLASS_BW_NAMES)), dv_ne_d=True, bmghk=False,
                        partial=False)),
        "flash": (_op("fa2F@2.8.3-pt", (torch.float16, torch.bfloat16), 256, tuple(c for c in ALL if c is not T),
                      dv_ne_d=False, bmghk=True, partial=True, align8=True, no_top_left=True),
                  _op("fa2B@2.8.3-pt", (torch.float16, torch.bfloat16), 256, FLASH_BW, dv_ne_d=False, bmghk=False,
                      partial=True, align8=True, no_top_left=True)),
        "flash3": (_op("fa3F@0.0.0", (torch.float16, torch.bfloat16), 256, ALL, dv_ne_d=True, bmghk=True,
                       partial=True, built=False),
                   _op("fa3B@0.0.0", (torch.float16, torch.bfloat16), 256, FLASH_BW, dv_ne_d=True, bmghk=False,
                       partial=True, built=False)),
        "triton_splitk": (_op("triton_splitKF", (torch.float16, torch.bfloat16), 512,
                              (N, T, ab.BlockDiagonalCausalWithOffsetPaddedKeysMask), dv_ne_d=False, bmghk=True,
                              partial=True), None),
    }
    for name, (fw, bw) in ops.items():
        m = types.ModuleType(f"xformers.ops.fmha.{name}")
        m.FwOp = fw
        if bw is not None:
            m.BwOp = bw
        setattr(fmha, name, m)
    dispatch = types.ModuleType("xformers.ops.fmha.dispatch")

    def first(names, which, inp):
        reasons = []
        for n in names:
            op = ops[n][which]
            why = op.not_supported_reasons(inp)
            if not why:
                return op
            reasons.append(f"`{op.NAME}` is not supported because:\n    " + "\n    ".join(why))
        raise NotImplementedError("No operator found for `memory_efficient_attention_forward` with inputs:\n"
                                  + "\n".join(reasons))

    dispatch._dispatch_fw = lambda inp, needs_gradient: first(("flash3", "flash", "cutlass"), 0, inp)
    dispatch._dispatch_bw = lambda inp, varlen_lse_packed: first(("flash3", "flash", "cutlass"), 1, inp)

    def attend(q, k, v, attn_bias, scale):
        """(out, lse) in float64 for BMHK / BMGHK inputs; lse [B, H, Mq] ([B, G, H, Mq] for BMGHK)."""
        five = q.dim() == 5
        if five:
            B, Mq, G, H, K = q.shape
            q, k, v = (x.flatten(2, 3) for x in (q, k, v))
        Mq, Mk = q.shape[1], k.shape[1]
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        s = torch.einsum("bmhk,bnhk->bhmn", q.double(), k.double()) * scale
        if isinstance(attn_bias, torch.Tensor):
            if mutant != "ignore_tensor_bias":
                s = s + (attn_bias.flatten(1, 2) if five else attn_bias).double()
        elif isinstance(attn_bias, _Bias):
            s = s.masked_fill(~attn_bias.keep(Mq, Mk), -math.inf)
        elif attn_bias is not None:  # xformers' own class: its dense form is 0 where attended, -inf elsewhere
            keep = attn_bias.materialize((Mq, Mk), dtype=torch.float64) == 0
            s = s.masked_fill(~keep, -math.inf)  # a kernel selects, so a masked NaN key never reaches a score
        top = s.amax(dim=-1, keepdim=True).detach()
        top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)  # rows with no key: every p is 0
        e = torch.exp(s - top)
        total = e.sum(dim=-1, keepdim=True)
        p = e / torch.where(total == 0, torch.ones_like(total), total)
        lse = (torch.log(total) + top)[..., 0]
        out = torch.einsum("bhmn,bnhk->bmhk", p, v.double().nan_to_num(0.0))  # a masked NaN value is never read
        if five:
            out, lse = out.unflatten(2, (G, H)), lse.unflatten(1, (G, H))
        return out, lse

    def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                                   output_dtype=None):
        inp = Inputs(query, key, value, attn_bias, p, scale)
        fw = op[0] if op else dispatch._dispatch_fw(inp, query.requires_grad)
        why = fw.not_supported_reasons(inp)
        if why:
            raise NotImplementedError(f"Operator `{fw.NAME}` does not support inputs: {why}")
        fmha.calls.append(("memory_efficient_attention", dict(bias=attn_bias, scale=scale, op=op, q=query, k=key)))
        return attend(query, key, value, attn_bias, scale)[0].to(query.dtype)

    def memory_efficient_attention_partial(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                                           output_dtype=None):
        fmha.calls.append(("partial", dict(bias=attn_bias, scale=scale, k=key)))
        out, lse = attend(query, key, value, attn_bias, scale)
        return out.float(), lse.float()

    def merge_attentions(attn_split, lse_split, write_lse=True, output_dtype=None):
        lse = torch.stack([x.double() for x in lse_split])
        top = lse.max(dim=0).values
        top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
        w = torch.exp(lse - top)
        total = w.sum(dim=0)
        def rows_first(x):  # [..., B, (G,) H, M] -> [..., B, M, (G,) H, 1], the layout of the outputs
            return x.movedim(-1, x.dim() - (3 if lse.dim() == 5 else 2))[..., None]

        out = (rows_first(w) * torch.stack([a.double() for a in attn_split])).sum(dim=0)
        denom = rows_first(total)
        out = out / torch.where(denom == 0, 1.0, denom)
        return out.to(output_dtype or attn_split[0].dtype), (torch.log(total) + top).float()

    fmha.attn_bias, fmha.common, fmha.dispatch = ab, common, dispatch
    fmha.memory_efficient_attention = memory_efficient_attention
    fmha.memory_efficient_attention_partial = memory_efficient_attention_partial
    fmha.merge_attentions = merge_attentions
    root, xops = types.ModuleType("xformers"), types.ModuleType("xformers.ops")
    root.ops, xops.fmha = xops, fmha
    modules = {"xformers": root, "xformers.ops": xops, "xformers.ops.fmha": fmha, "xformers.ops.fmha.attn_bias": ab,
               "xformers.ops.fmha.common": common, "xformers.ops.fmha.dispatch": dispatch}
    modules.update({f"xformers.ops.fmha.{n}": getattr(fmha, n) for n in ops})
    return fmha, modules


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(tc, "cuda_unavailable_reason", lambda *a, **k: None)

    def install(mutant=None, biases=None):
        fmha, modules = make_xformers(mutant, biases)
        for name, mod in modules.items():
            monkeypatch.setitem(sys.modules, name, mod)
        return fmha

    yield install
    _Bias.mutant = None


_ORACLES = OracleCache()


def _runner(adapter):
    return in_process_runner(adapter, _ORACLES)


FAMILIES = ("causal_alignment", "window", "varlen", "nan_padding", "decoding", "gqa", "mask_bias", "masked_rows",
            "chunked", "layout", "scale", "backward", "head_dims")
CASES = small_cases(FAMILIES)


# -- what is claimed -----------------------------------------------------------------------------------------------
def test_claims_come_from_the_operators_declarations(stand_in):
    stand_in()
    flash = xf.Xformers("flash").capabilities
    assert flash.dtypes == frozenset({"float16", "bfloat16"}) and flash.max_head_dim == 256
    assert flash.gqa and flash.backward and not flash.mask and not flash.softcap and not flash.lse
    cutlass = xf.Xformers("cutlass").capabilities
    assert cutlass.max_head_dim == 65536 and "float32" in cutlass.dtypes and cutlass.dv_ne_d and cutlass.mask
    assert cutlass.library_check and "not_supported_reasons" in cutlass.library_check
    assert not xf.Xformers("triton_splitk").capabilities.backward
    tl = xf.Xformers("LowerTriangularMask").capabilities
    assert tl.alignments == frozenset({"top_left"}) and not tl.noncausal and not tl.window and not tl.varlen
    assert tl.backward
    dense = xf.Xformers("tensor").capabilities
    assert dense.mask and dense.bias and dense.window and dense.chunk and dense.padding_as_mask and dense.varlen
    assert dense.alignments == frozenset({"top_left", "bottom_right"})
    blocks = xf.Xformers("BlockDiagonalCausalWithOffsetPaddedKeysMask").capabilities
    assert blocks.varlen and blocks.layouts == frozenset({"contiguous"}) and not blocks.backward
    partial = xf.Xformers("partial").capabilities
    assert partial.lse and not partial.backward and partial.alignments == frozenset() and not partial.varlen


def test_without_the_library_nothing_is_claimed(monkeypatch):
    monkeypatch.setitem(sys.modules, "xformers.ops.fmha", None)
    a = xf.Xformers("flash")
    assert a.capabilities.dtypes == frozenset() and a.module() is None and "not importable" in a._import_error


def test_a_build_whose_extensions_do_not_load_is_unavailable_in_xformers_words(stand_in, monkeypatch):
    """xformers' wheel is built for one torch: beside another its C++/CUDA extensions do not load and every operator
    declines every call (on an H100 with torch 2.11 + cu130 the PyPI 0.0.35 wheel, built for torch 2.10 + cu128,
    declined all of the gpu profile); the adapter says so once, as why it is unavailable."""
    stand_in()
    top = sys.modules["xformers"]
    assert xf.cpp_library_reason() is None and xf.Xformers("cutlass").unavailable_reason("cuda") is None

    class InvalidLib(Exception):
        def __str__(self):
            return ("xFormers can't load C++/CUDA extensions. xFormers was built for:\n    PyTorch 2.10.0+cu128 with "
                    "CUDA 1208 (you have 2.11.0+cu130)\n  Please reinstall xformers (see https://github.com/...)")

    monkeypatch.setattr(top, "_has_cpp_library", False, raising=False)
    monkeypatch.setattr(top, "_cpp_lib", types.SimpleNamespace(_cpp_library_load_exception=InvalidLib()),
                        raising=False)
    for entry in (None, "cutlass", "flash", "triton_splitk", "partial"):
        reason = xf.Xformers(entry).unavailable_reason("cuda")
        assert reason == ("xformers cannot load its C++/CUDA extensions, without which none of its operators runs: "
                          "xFormers can't load C++/CUDA extensions. xFormers was built for: PyTorch 2.10.0+cu128 "
                          "with CUDA 1208 (you have 2.11.0+cu130)"), (entry, reason)
    # the loader's own error, where the load exception has one, and what it means for the CUDA 12 runtime
    failed = InvalidLib()
    failed.__cause__ = OSError("Could not load this library: .../xformers/_C.so")  # torch.ops.load_library's
    failed.__cause__.__context__ = OSError("libcudart.so.12: cannot open shared object file: No such file or directory")
    monkeypatch.setattr(top, "_cpp_lib", types.SimpleNamespace(_cpp_library_load_exception=failed), raising=False)
    reason = xf.Xformers("cutlass").unavailable_reason("cuda")
    assert "(OSError: libcudart.so.12: cannot open shared object file: No such file or directory)" in reason, reason
    assert "LD_LIBRARY_PATH" in reason and "nvidia-cuda-runtime-cu12" in reason, reason


def test_spellings_decline_what_they_cannot_say(stand_in):
    fmha = stand_in()
    base = Case("t", 2, 4, 2, 8, 12, 64, 64)
    assert "non-causal attention not supported" in xf.Xformers("LowerTriangularMask").supports(base, "cpu")
    assert xf.Xformers("LowerTriangularFromBottomRightMask").supports(base.replace(Lq=1), "cpu") is None  # vacuous
    local = "LowerTriangularFromBottomRightLocalAttentionMask"
    assert "window_size" in xf.Xformers(local).supports(base.replace(causal=True), "cpu")
    assert xf.Xformers(local).supports(base.replace(causal=True, window=(3, None)), "cpu") is None
    assert xf.Xformers(local).supports(base.replace(window=(3, 0)), "cpu") is None  # (left, 0) is causal
    assert "alignment" in xf.Xformers("LowerTriangularMask").supports(base.replace(causal=True), "cpu")
    # xformers' own words: flash's head-dim alignment, the dispatcher, a bias constructor refusing the lengths
    assert "% 8" in xf.Xformers("flash").supports(base.replace(d=4, dv=4), "cpu")
    dense = xf.Xformers("tensor")
    cutlass_reasons = fmha.cutlass.FwOp.not_supported_reasons
    fmha.cutlass.FwOp.not_supported_reasons = classmethod(
        lambda cls, d: cutlass_reasons(d) + (["query.shape[-1] > 512"] if d.query.shape[-1] > 512 else []))
    assert "No operator found" in dense.supports(base.replace(mask="random", d=600, dv=600), "cpu")
    far = Case("t", 1, 2, 2, 12, 4, 64, 64, causal=True, alignment="top_left", window=(2, None),
               seqlens_q=(12,), seqlens_k=(4,))
    assert "No keys are attended" in xf.Xformers("BlockDiagonalCausalLocalAttentionMask").supports(far, "cpu")
    assert "softcap" in xf.Xformers().supports(base.replace(softcap=5.0), "cpu")


# -- the translation, judged ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", [None, *xf.ENTRY_POINTS])
def test_every_claimed_case_passes_and_keeps_its_features(stand_in, entry):
    """Each spelling on the CI catalog's small cases (backward included): everything it claims PASSes against the
    oracle, and every call carried the case's causal mask (with its alignment), window, lengths, mask and bias."""
    fmha = stand_in()
    adapter = xf.Xformers(entry)
    runner, la = _runner(adapter)
    claimed, declined = 0, []
    for case in CASES:
        fmha.calls.clear()
        r = runner.run_case(la, case)
        if r.outcome == NOT_SUPPORTED:
            declined.append(r.message)
            continue
        claimed += 1
        assert r.outcome in (PASS, FINDING, QUALITY_WARNING), (case.id, r.outcome, r.message[:600])
        assert r.kernels and r.kernels[0].startswith("xformers:") or entry == "partial", r.kernels
        _assert_features_reached(case, fmha.calls)
    if entry == "flash3":  # the stand-in's FA3 operator is not built (no flash_attn_3), as on the H200
        assert claimed == 0 and any("wasn't built" in m for m in declined), declined[:3]
    else:
        assert claimed >= 2, f"{adapter.name} claimed only {claimed} of {len(CASES)} cases"


def _xformers_attn_bias():
    """xformers' own ``attn_bias`` module where xformers is installed (pure Python: its classes and ``materialize``
    run on the CPU; the C++ / CUDA extensions it warns about are not needed), else None."""
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from xformers.ops.fmha import attn_bias
    except Exception:  # not installed, or an xformers that does not import beside this torch
        return None
    return attn_bias


REAL_BIASES = _xformers_attn_bias()


@pytest.mark.skipif(REAL_BIASES is None, reason="xformers is not installed (the `xformers` extra)")
@pytest.mark.parametrize("entry", [None, *xf.ENTRY_POINTS])
def test_every_claimed_case_passes_with_xformers_own_bias_classes(stand_in, entry):
    """The same cases with xformers' own ``attn_bias`` classes in place of the stand-in's: the bias objects the
    adapter builds (constructors, ``from_seqlens`` with padded keys, ``make_local_attention``) are materialized by
    xformers' code, so a PASS here means the translation says each case in xformers' semantics, not in this test's
    reading of its documentation. The operators, the dispatcher and the float64 kernel stay the stand-in's."""
    stand_in(biases=REAL_BIASES)
    adapter = xf.Xformers(entry)
    runner, la = _runner(adapter)
    claimed = 0
    for case in CASES:
        r = runner.run_case(la, case)
        if r.outcome == NOT_SUPPORTED:
            continue
        claimed += 1
        assert r.outcome in (PASS, FINDING, QUALITY_WARNING), (case.id, r.outcome, r.message[:600])
    assert claimed >= 2 or entry == "flash3", f"{adapter.name} claimed only {claimed} of {len(CASES)} cases"


def _assert_features_reached(case: Case, calls):
    assert calls, f"{case.id}: no call recorded"
    for _, kw in calls:
        bias = kw["bias"]
        dense = isinstance(bias, torch.Tensor)
        if case.mask is not None or case.bias is not None or case.chunk is not None:
            assert dense, f"{case.id}: mask / bias lost"
        if case.causal and not causal_hides_nothing(case, case.alignment) and not dense:
            assert bias is not None and "Causal" in type(bias).__name__ or "Triangular" in type(bias).__name__, \
                f"{case.id}: causal lost ({type(bias).__name__})"
        if case.window is not None and case.window[0] is not None and not dense:
            window = getattr(bias, "_window_size", None) or getattr(bias, "window", None)
            assert window == case.window[0] + 1, f"{case.id}: window lost ({type(bias).__name__})"
        if case.varlen and not dense:
            assert isinstance(bias, BlockDiagonalMask), f"{case.id}: lengths lost ({type(bias).__name__})"
            sq = case.seqlens_q or (case.Lq,) * case.B
            assert bias.q_seqlen == list(sq), f"{case.id}: query lengths {bias.q_seqlen} != {sq}"
        if case.Hq != case.Hkv:
            assert kw["k"].dim() == 5 and kw["k"].stride(3) == 0, f"{case.id}: GQA not as BMGHK with expanded K"


def test_dispatcher_pick_is_recorded_first_in_kernels(stand_in):
    stand_in()
    runner, la = _runner(xf.Xformers())
    f16 = next(c for c in CASES if c.dtype == "float16" and c.d % 8 == 0 and c.mask is None and c.bias is None
               and not c.backward)
    assert runner.run_case(la, f16).kernels[0] == "xformers:fa2F@2.8.3-pt"
    f32 = next(c for c in CASES if c.dtype == "float32" and not c.backward)
    assert runner.run_case(la, f32).kernels[0] == "xformers:cutlassF-pt"
    runner, la = _runner(xf.Xformers("cutlass"))
    bwd = next(c for c in CASES if c.backward and c.Hq == c.Hkv and c.mask is None)
    assert list(runner.run_case(la, bwd).kernels[:2]) == ["xformers:cutlassF-pt", "xformers:cutlassB-pt"]


MUTANTS = {
    "top_left_is_bottom_right": ("LowerTriangularMask", "causal_alignment"),
    "ignore_kv_seqlen": ("BlockDiagonalCausalWithOffsetPaddedKeysMask", "nan_padding"),
    "ignore_tensor_bias": ("tensor", "mask_bias"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_stand_in_missing_a_semantic_fails(stand_in, mutant):
    """Against a stand-in that drops one semantic (top-left alignment, padded keys' lengths, the tensor bias),
    some claimed case of the family FAILs, so a PASS above means something."""
    entry, family = MUTANTS[mutant]
    stand_in(mutant)
    runner, la = _runner(xf.Xformers(entry))
    outcomes = [runner.run_case(la, c).outcome for c in small_cases((family,), per_family=12)]
    assert FAIL in outcomes, (mutant, outcomes)


def test_window_size_is_left_plus_one():
    c = Case("t", 1, 1, 1, 4, 8, 64, 64, causal=True, window=(3, None))
    assert xf.window_size(c) == 4
    with pytest.raises(ValueError, match="no finite left window"):
        xf.window_size(c.replace(window=(None, 2)))


@pytest.mark.parametrize("entry", [None, *xf.ENTRY_POINTS])
def test_the_declaration_and_claim_reason_agree(stand_in, entry):
    """What the Capabilities declaration claims is what the declaration-side decline (`claim_reason`) takes; the
    rest of `supports` is xformers' own run-time answer, which the declaration names (``library_check``)."""
    stand_in()
    adapter = xf.Xformers(entry)
    assert adapter.capabilities.library_check or adapter.capabilities.dtypes == frozenset()
    for case in CASES:
        declared = capability_reason(adapter.capabilities, case, "cuda") is None
        claimed = adapter.claim_reason(case, "cuda") is None
        assert declared == claimed or (claimed and any(
            capability_reason(adapter.capabilities, form, "cuda") is None for form in equivalent_cases(case))), \
            (adapter.name, case.id, adapter.claim_reason(case, "cuda"))


# -- the standalone repro file (conformance/reproduce/xformers_calls.py) -------------------------------------------
def _standalone_module(case: Case, spec: str, monkeypatch):
    """The file `repro --standalone` writes for (case, spec) as on a machine without CUDA (the bias spelling from the
    declarations), on the CPU (``import xformers.ops.fmha`` finds the stand-in)."""
    from attention_conformance.reproduce.standalone import standalone

    with monkeypatch.context() as m:
        m.setattr(tc, "cuda_unavailable_reason", lambda *a, **k: "no CUDA device where the file is written")
        text = standalone(case, spec, "cuda")
    return standalone_on_cpu(text), text


def _standalone_pairs():
    """Per spelling (and the per-case adapter), up to two small cases it claims by its declarations: those of its
    mutants, packed sequences, GQA and the backward first."""
    _, modules = make_xformers()
    try:
        with installed(modules):
            return spread_pairs((None, *xf.ENTRY_POINTS), xf.Xformers, CASES,
                                lambda e: {f for x, f in MUTANTS.values() if x == e} | {"varlen", "gqa", "backward"},
                                lambda adapter, case: adapter.claim_reason(case, "cuda") is None)
    finally:
        _Bias.mutant = None


STANDALONE = _standalone_pairs()


@pytest.mark.parametrize("entry,case", STANDALONE, ids=[f"{e or 'auto'}-{c.id}" for e, c in STANDALONE])
def test_the_standalone_file_makes_the_adapters_call(stand_in, monkeypatch, entry, case):
    """The file's call, run against the stand-in, says what the harness says through the adapter (exit 0 where it
    PASSes, 1 where it FAILs, 2 where xformers declines), with and without a dropped semantic (top-left alignment,
    padded keys' lengths, the tensor bias); it imports nothing from this package."""
    spec = "xformers" + (f"@{entry}" if entry else "")
    for mutant in (None, *(m for m, (e, f) in MUTANTS.items() if f == case.family)):
        fmha = stand_in(mutant)
        runner, la = _runner(xf.Xformers(entry))
        verdict = runner.run_case(la, case)
        mod, text = _standalone_module(case, spec, monkeypatch)
        assert "attention_conformance" not in text.split('"""', 2)[2].replace("attention-conformance", "")
        fmha.calls.clear()
        rc, said = file_status(mod)
        want = 2 if verdict.outcome == NOT_SUPPORTED else 1 if verdict.outcome in (FAIL, FINDING) else 0
        assert rc == want, (mutant, verdict.outcome, verdict.message[:300], said[-600:])
        assert fmha.calls or rc == 2, "the file made no call"


def test_standalone_files_cover_every_spelling_and_lint_clean(stand_in, monkeypatch, tmp_path):
    import importlib.util
    import subprocess

    assert {e for e, _ in STANDALONE} >= {None, *xf.ENTRY_POINTS} - {"flash3"}  # flash3: not built, claims nothing
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (the lint extra)")
    stand_in()
    paths = []
    for entry, case in STANDALONE:
        _, text = _standalone_module(case, "xformers" + (f"@{entry}" if entry else ""), monkeypatch)
        path = tmp_path / f"{entry or 'auto'}-{case.id}.py"
        path.write_text(text)
        paths.append(str(path))
    root = __file__.rsplit("/tests/", 1)[0]
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config", f"{root}/pyproject.toml",
                        *paths], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


# -- beside flash-attn-4 ---------------------------------------------------------------------------------------------
_IMPORT_BESIDE_FA4 = """
import importlib, sys
try:
    importlib.import_module("xformers.ops.fmha")
    print("plain import: ok")
except Exception as exc:
    print(f"plain import: {type(exc).__name__}")
for name in [n for n in sys.modules if n.startswith("xformers")]:
    del sys.modules[name]
from attention_conformance.adapters.xformers import Xformers
a = Xformers()
print("adapter import:", "ok" if a.module() is not None else a._import_error)
import flash_attn
print("flash_attn after:", flash_attn.__file__)
print("note:", any("hidden" in m for m in a.import_messages))
"""
#: the benchmarks' xformers row (tools/vendor_rows.py), in a process of its own: it imports xformers the same way
_BENCH_ROW_BESIDE_FA4 = """
import sys
sys.path.insert(0, sys.argv[1])
import torch, vendor_rows
fn, note = vendor_rows.xformers_fn(*(torch.zeros(1, 2, 8, 16) for _ in range(3)), False)
print("bench row:", note)
"""


@pytest.mark.skipif(importlib.util.find_spec("xformers") is None, reason="xformers is not installed")
def test_xformers_imports_beside_a_flash_attn_package_without_fa2(tmp_path):
    """The H200 runner has flash-attn-4 (a ``flash_attn`` package with ``cute`` only): xformers 0.0.35's own import
    then fails (it imports ``flash_attn.flash_attn_interface``); the adapter imports it with ``flash_attn`` hidden,
    says so, and leaves ``flash_attn`` importable afterwards."""
    import os
    import subprocess

    pkg = tmp_path / "flash_attn"
    (pkg / "cute").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "4.0.0b36"\n')
    (pkg / "cute" / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    tools = Path(__file__).resolve().parents[2] / "tools"
    out = "".join(subprocess.run([sys.executable, "-c", script, str(tools)], env=env, capture_output=True, text=True,
                                 timeout=300).stdout for script in (_IMPORT_BESIDE_FA4, _BENCH_ROW_BESIDE_FA4))
    assert "plain import: ModuleNotFoundError" in out, out
    assert "adapter import: ok" in out and f"flash_attn after: {pkg / '__init__.py'}" in out, out
    assert "note: True" in out, out
    assert "bench row:" in out and "does not import" not in out, out
