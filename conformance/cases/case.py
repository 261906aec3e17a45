"""One conformance case: shapes, semantics and input recipe, hashable and reproducible from its id.

A `Case` says *what* to compute (oracles/SEMANTICS.md §1-§9) and *how to make the inputs*
(`distribution`, `seed`, `layout`); `conformance.cases.inputs.make_inputs(case)` turns it into FP64 arrays
whose values are exactly representable in ``case.dtype`` so the oracle and the kernel see the same
numbers. The catalog (`conformance.cases.catalog`) builds lists of cases per profile.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field

__all__ = ["Case", "FP8Spec", "DTYPES", "ALIGNMENTS", "LAYOUTS", "PAGED_LAYOUTS", "DISTRIBUTIONS", "SINK_RECIPES",
           "page_size_of"]

DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
ALIGNMENTS = ("bottom_right", "top_left")
# contiguous: [B, H, L, D] contiguous; bshd: a [B, L, H, D] tensor transposed to [B, H, L, D];
# kv_broadcast: K and V are one [1, Hkv, Lk, D] tensor expanded with batch stride 0.
LAYOUTS = ("contiguous", "bshd", "kv_broadcast")
# pagedN: K and V stored in pages of N keys behind a block table (SEMANTICS.md §16); the logical K/V,
# what the oracle sees, are the dense arrays. Deliberately NOT part of LAYOUTS: an adapter claims paged
# storage only by listing these in `Capabilities.layouts` (the default, frozenset(LAYOUTS), does not).
PAGED_LAYOUTS = ("paged64", "paged128", "paged256")
# normal: N(0,1); outliers: N(0,1) + N(0,10^2) on 0.1% of entries (FA3 paper); large_logits:
# |s| up to ~1e4; ties: constant rows / repeated keys; tiny_lse: LSE far below -88.7;
# nan_padding: normal values, but with varlen the padded rows (q and dout rows i >= seqlens_q[b],
# k and v rows j >= seqlens_k[b]) are NaN: a kernel that reads them (P = 0 times V = NaN is NaN)
# fails (SEMANTICS.md §7, §15; torch #101967, flash-attention #443, #752).
DISTRIBUTIONS = ("normal", "outliers", "large_logits", "ties", "tiny_lse", "uniform", "activations", "nan_padding")
# Sink logits, one per query head (SEMANTICS.md §18; `conformance.cases.inputs.make_sinks`): small ~ N(0, 1); large:
# head 0 at 1e4 (an LSE of +inf when the sink is left out of the running max), the others 8..40; very_negative:
# -1e4 and -60..-90 (the sink underflows, exactly no effect in FP32).
SINK_RECIPES = ("small", "large", "very_negative")
# Fields added after the first catalog: left out of `Case.key` (hence of every id) while at their default, so
# the ids of the cases that do not use them stay what they were.
_LATE_FIELDS = {"sinks": None, "chunk": None, "kv_append": None, "lse_grad": False}


def page_size_of(layout: str) -> int | None:
    """Keys per page of a paged layout (``"paged128"`` -> 128, SEMANTICS.md §16); None for a dense layout."""
    if layout in PAGED_LAYOUTS:
        return int(layout[len("paged"):])
    return None


@dataclass(frozen=True)
class FP8Spec:
    """FP8 forward settings (SEMANTICS.md §10-§11)."""

    format: str = "e4m3fn"  # "e4m3fn" | "e5m2"
    granularity: str = "per_tensor"  # "per_tensor" | "per_head" (B, Hkv) | "per_tile"
    tile_q: int = 128  # B_r for per-tile Q scales
    tile_k: int = 128  # B_c for per-tile K/V scales
    incoherent: bool = False  # random Hadamard on Q and K
    hadamard_seed: int = 0

    def quantize_kwargs(self) -> dict:
        """The keyword arguments of `oracles.fp8.quantize_attention_inputs` (and the CUDA quantizer's) for this spec."""
        return dict(format=self.format, granularity=self.granularity, tile_q=self.tile_q, tile_k=self.tile_k,
                    incoherent=self.incoherent, seed=self.hadamard_seed)


@dataclass(frozen=True)
class Case:
    """A single attention problem; see oracles/SEMANTICS.md for the meaning of every field."""

    family: str
    B: int
    Hq: int
    Hkv: int
    Lq: int
    Lk: int
    d: int
    dv: int
    dtype: str = "float16"
    scale: float | None = None
    causal: bool = False
    alignment: str = "bottom_right"
    window: tuple[int | None, int | None] | None = None
    mask: str | None = None  # name of a mask recipe in conformance.cases.inputs, e.g. "random", "full_rows"
    bias: str | None = None  # name of a bias recipe, e.g. "random", "alibi"
    softcap: float | None = None
    seqlens_q: tuple[int, ...] | None = None
    seqlens_k: tuple[int, ...] | None = None
    distribution: str = "normal"
    layout: str = "contiguous"
    backward: bool = False
    fp8: FP8Spec | None = None
    seed: int = 0
    sinks: str | None = None  # sink recipe (SINK_RECIPES), one logit per query head (SEMANTICS.md §18)
    chunk: int | None = None  # chunked attention: chunk size of the aligned positions (§19)
    kv_append: tuple[int, ...] | None = None  # KV-cache append: cache_seqlens per batch before the Lq new rows (§20)
    lse_grad: bool = False  # backward with an LSE cotangent dlse (the LSE is an output with a gradient, §13, §18)
    note: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.kv_append is not None:
            if self.seqlens_k is not None:
                raise ValueError(f"Case.kv_append={self.kv_append} sets the key lengths (cache_seqlens + Lq); "
                                 f"seqlens_k must be None, got {self.seqlens_k}")
            if len(self.kv_append) != self.B or any(n < 0 or n + self.Lq > self.Lk for n in self.kv_append):
                raise ValueError(f"Case.kv_append={self.kv_append} must hold B={self.B} cache lengths with "
                                 f"cache_seqlens + Lq <= Lk (Lq={self.Lq} new rows, Lk={self.Lk} cache slots)")
        if self.chunk is not None and self.chunk < 1:
            raise ValueError(f"Case.chunk={self.chunk} must be >= 1 (SEMANTICS.md §19)")
        if self.sinks is not None and self.sinks not in SINK_RECIPES:
            raise ValueError(f"Case.sinks={self.sinks!r} is not a sink recipe; known: {SINK_RECIPES}")

    # -- derived -------------------------------------------------------------------------------
    @property
    def gqa_ratio(self) -> int:
        return self.Hq // self.Hkv

    @property
    def dv_ratio(self) -> float:
        """head_dim_v / head_dim (1.0 where dv = d)."""
        return self.dv / self.d

    @property
    def varlen(self) -> bool:
        return self.seqlens_q is not None or self.seqlens_k is not None

    @property
    def effective_seqlens_k(self) -> tuple[int, ...] | None:
        """The key lengths attended: ``seqlens_k``, or for KV append ``cache_seqlens + Lq`` (§20)."""
        if self.kv_append is not None:
            return tuple(int(n) + self.Lq for n in self.kv_append)
        return self.seqlens_k

    @property
    def oracle_kwargs(self) -> dict:
        """Keyword arguments of `oracles.attention` except mask/bias/sink arrays (made by inputs).

        ``chunk`` is present only when set, so an adapter that forwards these keywords to a function that
        predates chunks is unaffected by every other case. KV-append cases attend ``effective_seqlens_k``.
        """
        kw = dict(
            scale=self.scale,
            causal=self.causal,
            alignment=self.alignment,
            window=self.window,
            softcap=self.softcap,
            seqlens_q=self.seqlens_q,
            seqlens_k=self.effective_seqlens_k,
        )
        if self.chunk is not None:
            kw["chunk"] = self.chunk
        return kw

    @property
    def id(self) -> str:
        """Stable, human-readable id; the trailing hash makes it unique over all fields."""
        parts = [self.family, f"b{self.B}h{self.Hq}x{self.Hkv}", f"q{self.Lq}k{self.Lk}", f"d{self.d}"]
        if self.dv != self.d:
            parts[-1] += f"v{self.dv}"
        parts.append(self.dtype.replace("float", "f").replace("bf", "bf"))
        if self.causal:
            parts.append("causal_" + ("br" if self.alignment == "bottom_right" else "tl"))
        if self.window is not None:
            parts.append(f"win{self.window[0]}_{self.window[1]}")
        if self.mask:
            parts.append(f"mask-{self.mask}")
        if self.bias:
            parts.append(f"bias-{self.bias}")
        if self.softcap:
            parts.append(f"cap{self.softcap:g}")
        if self.distribution != "normal":
            parts.append(self.distribution)
        if self.layout != "contiguous":
            parts.append(self.layout)
        if self.sinks:
            parts.append(f"sink-{self.sinks}")
        if self.chunk is not None:
            parts.append(f"chunk{self.chunk}")
        if self.kv_append is not None:
            parts.append("kvappend")
        if self.backward:
            parts.append("bwd")
        if self.lse_grad:
            parts.append("dlse")
        if self.fp8 is not None:
            parts.append(f"fp8-{self.fp8.format}-{self.fp8.granularity}" + ("-had" if self.fp8.incoherent else ""))
        digest = hashlib.sha1(repr(self.key()).encode()).hexdigest()[:6]
        return "-".join(parts) + "-" + digest

    def key(self) -> tuple:
        """All semantic fields, in a fixed order (the identity of the case); late fields only when set."""
        return tuple(
            (f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
            if f.compare and not (f.name in _LATE_FIELDS and getattr(self, f.name) == _LATE_FIELDS[f.name])
        )

    def replace(self, **changes) -> Case:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["id"] = self.id
        return d

    @classmethod
    def from_dict(cls, data: dict) -> Case:
        data = {k: v for k, v in data.items() if k != "id"}
        if data.get("fp8") is not None:
            data["fp8"] = FP8Spec(**data["fp8"])
        for name in ("window", "seqlens_q", "seqlens_k", "kv_append"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return cls(**data)
