"""A NumPy model of the FA3 backward's wide schedule (kernels/cuda/include/hopper/bwd_wide.cuh: d = 192, 256 and
(d, dv) = (192, 128)) against the FP64 oracle, on the CPU.

The model follows the kernel's index math step by step, in float64 (the kernel's bf16 roundings of P^T / dS^T are not
modelled: this checks the tiling, not the numerics): CTAs of 64 keys (`BwdTiles`: the query tiles from
``rows_for_keys``, the non-deterministic rotation), K / V / Q / dO tiles with the padding TMA fills with zeros and the
rows past the real lengths zeroed (the inputs hold NaN there), LSE -inf read as +inf, consumer w's S^T / dP^T over
queries [32 w, 32 w + 32) of the tile with the per-element mask only where ``tile_full`` says so, the P^T / dS^T halves
assembled into the shared [64 keys][64 queries] tiles, consumer 0's dK += dS^T Q and consumer 1's dV += P^T dO, and the
dQ blocks of `Fa3BwdWideConfig` (kDq0, kDq1End, kDqAltLast; `WideDqBlocks::of`) added into dq_accum. It also checks
the deterministic order's count: the key tiles that add into a query tile before key tile n are exactly the
n - klo / 64 that the dQ writer / consumers wait for.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_conformance.oracles import attention, attention_backward

BN = BM = 64  # keys per CTA, query rows per tile
HM = 32  # query rows per consumer in S^T / dP^T
LOG2E = 1.4426950408889634


class Mask:
    """kernels/cuda/include/mask.cuh SeqMask: visible, tile_full, rows_for_keys, keys_for_rows."""

    def __init__(self, sq: int, sk: int, causal: bool, alignment: str, window: tuple) -> None:
        self.sq, self.sk = sq, sk
        self.off = sk - sq if alignment == "bottom_right" else 0
        left, right = window
        self.left = -1 if left is None else left
        self.right = 0 if causal else (-1 if right is None else right)

    def visible(self, i: int, j: int) -> bool:
        if i >= self.sq or j >= self.sk:
            return False
        c = i + self.off
        return not ((self.right >= 0 and j > c + self.right) or (self.left >= 0 and j < c - self.left))

    def tile_full(self, r0: int, r1: int, c0: int, c1: int) -> bool:
        if r1 > self.sq or c1 > self.sk:
            return False
        if self.right >= 0 and c1 - 1 > r0 + self.off + self.right:
            return False
        return not (self.left >= 0 and c0 < r1 - 1 + self.off - self.left)

    def rows_for_keys(self, c0: int, c1: int) -> tuple[int, int]:
        c1 = min(c1, self.sk)
        if c0 >= c1:
            return 1, 0
        lo, hi = 0, self.sq - 1
        if self.right >= 0:
            lo = max(lo, c0 - self.off - self.right)
        if self.left >= 0:
            hi = min(hi, c1 - 1 - self.off + self.left)
        return (1, 0) if lo > hi else (lo, hi)

    def keys_for_rows(self, r0: int, r1: int) -> tuple[int, int]:
        r1 = min(r1, self.sq)
        if r0 >= r1:
            return 1, 0
        lo, hi = 0, self.sk - 1
        if self.left >= 0:
            lo = max(lo, r0 + self.off - self.left)
        if self.right >= 0:
            hi = min(hi, r1 - 1 + self.off + self.right)
        return (1, 0) if lo > hi else (lo, hi)


def dq_blocks(d: int, dv: int, cw: int, it: int) -> list[int]:
    """bwd_wide.cuh Fa3BwdWideConfig (kDq0, kDq1End, kDqAltLast) and WideDqBlocks::of: consumer cw's dQ blocks."""
    nk, nv = d // 64, dv // 64
    dq0, alt = nv // 2, nv % 2 != 0
    dq1_end = nk - (1 if alt else 0)
    blocks = list(range(0, dq0)) if cw == 0 else list(range(dq0, dq1_end))
    if alt and it % 2 == cw:
        blocks.append(nk - 1)
    return blocks


def _tile(x: np.ndarray, r0: int, rows: int, real: int) -> np.ndarray:
    """Rows [r0, r0 + rows) of x [L, n]: past the tensor TMA's zeros, past the real length (NaN inside the tensor)
    zeroed by the consumers."""
    out = np.zeros((rows, x.shape[1]))
    n = max(0, min(rows, x.shape[0] - r0))
    out[:n] = x[r0:r0 + n]
    out[max(0, real - r0):] = 0.0
    return out


def wide_backward(q, k, v, dout, o, lse, *, scale, causal=False, alignment="bottom_right", window=(None, None),
                  softcap=None, seqlens_q=None, seqlens_k=None, deterministic=False):
    """(dq, dk, dv) of the wide schedule (see the module doc); arrays [B, H, L, dim] float64."""
    B, Hq, Lq, d = q.shape
    Hkv, Lk, dv = k.shape[1], k.shape[2], v.shape[3]
    dq_acc = np.zeros((B, Hq, Lq, d))
    dk_h, dv_h = np.zeros((B, Hq, Lk, d)), np.zeros((B, Hq, Lk, dv))
    num_n = (Lk + BN - 1) // BN
    for b in range(B):
        sq = Lq if seqlens_q is None else min(seqlens_q[b], Lq)
        sk = Lk if seqlens_k is None else min(seqlens_k[b], Lk)
        mask = Mask(sq, sk, causal, alignment, window)
        for h in range(Hq):
            hk = h // (Hq // Hkv)
            rows = np.arange(Lq)
            # the producer's LSE * log2 e (-inf -> +inf; rows past the real length +inf) and D (0 past it)
            lse2 = np.where(rows < sq, np.where(np.isneginf(lse[b, h]), np.inf, lse[b, h] * LOG2E), np.inf)
            with np.errstate(invalid="ignore"):
                dsum = np.where(rows < sq, np.nan_to_num((dout[b, h] * o[b, h]).sum(-1)), 0.0)
            adders: dict[int, list[int]] = {}  # query tile -> key tiles in the order they add
            for n in range(num_n):
                n0 = n * BN
                kt, vt = _tile(k[b, hk], n0, BN, sk), _tile(v[b, hk], n0, BN, sk)
                qlo, qhi = mask.rows_for_keys(n0, n0 + BN)
                t_first = qlo // BM
                n_tiles = qhi // BM - t_first + 1 if qlo <= qhi else 0
                rot = n % n_tiles if (n_tiles > 0 and not deterministic) else 0
                acc = [np.zeros((BN, d)), np.zeros((BN, dv))]  # consumer 0: dK, consumer 1: dV
                for it in range(n_tiles):
                    x = it + rot
                    m0 = (t_first + (x - n_tiles if x >= n_tiles else x)) * BM
                    qt, dot = _tile(q[b, h], m0, BM, sq), _tile(dout[b, h], m0, BM, sq)
                    lt = np.full(BM, np.inf)
                    dt = np.zeros(BM)
                    nr = max(0, min(BM, Lq - m0))
                    lt[:nr], dt[:nr] = lse2[m0:m0 + nr], dsum[m0:m0 + nr]
                    pt, dst = np.full((BN, BM), np.nan), np.full((BN, BM), np.nan)
                    for cw in range(2):
                        c = slice(cw * HM, cw * HM + HM)
                        s_t = kt @ qt[c].T  # [64 keys x 32 queries]
                        dp_t = vt @ dot[c].T
                        if softcap:
                            th = np.tanh(s_t * scale / softcap)
                            p = np.exp2(softcap * th * LOG2E - lt[c][None, :])
                            dcap = 1.0 - th * th
                        else:
                            p = np.exp2(s_t * scale * LOG2E - lt[c][None, :])
                            dcap = 1.0
                        if not mask.tile_full(m0 + cw * HM, m0 + cw * HM + HM, n0, n0 + BN):
                            vis = np.array([[mask.visible(m0 + cw * HM + i, n0 + j) for i in range(HM)]
                                            for j in range(BN)])
                            p = np.where(vis, p, 0.0)
                        assert np.isfinite(p).all() and np.isfinite(dp_t).all()
                        pt[:, c] = p
                        dst[:, c] = p * dcap * (dp_t - dt[c][None, :])
                    assert np.isfinite(pt).all() and np.isfinite(dst).all(), "both halves written"
                    acc[0] += dst @ qt
                    acc[1] += pt @ dot
                    owned = dq_blocks(d, dv, 0, it) + dq_blocks(d, dv, 1, it)
                    assert sorted(owned) == list(range(d // 64)), owned  # every dQ block once per tile
                    for qb in owned:
                        blk = dst.T @ kt[:, 64 * qb:64 * qb + 64]
                        assert not blk[max(0, sq - m0):].any(), "dQ rows past the real length are 0"
                        dq_acc[b, h, m0:m0 + nr, 64 * qb:64 * qb + 64] += blk[:nr]
                    adders.setdefault(m0 // BM, []).append(n)
                nk_rows = max(0, min(BN, Lk - n0))
                dk_h[b, h, n0:n0 + nk_rows] = scale * acc[0][:nk_rows]
                dv_h[b, h, n0:n0 + nk_rows] = acc[1][:nk_rows]
            # the deterministic order: key tile n adds into query tile m after exactly n - klo / 64 others
            for m, ns in adders.items():
                klo, _ = mask.keys_for_rows(m * BM, m * BM + BM)
                assert sorted(ns) == list(range(klo // BN, klo // BN + len(ns))), (m, ns, klo)
                for n in ns:
                    assert sum(1 for x in ns if x < n) == n - klo // BN
    dq = scale * dq_acc
    for b in range(B):
        sq = Lq if seqlens_q is None else min(seqlens_q[b], Lq)
        dq[b, :, sq:] = 0.0  # bwd_convert_dq: padded rows 0
    g = Hq // Hkv
    dk = dk_h.reshape(B, Hkv, g, Lk, d).sum(2)
    dvv = dv_h.reshape(B, Hkv, g, Lk, dv).sum(2)
    return dq, dk, dvv


CASES = [
    dict(B=1, Hq=2, Hkv=2, Lq=150, Lk=200),
    dict(B=1, Hq=2, Hkv=1, Lq=173, Lk=130, causal=True),
    dict(B=1, Hq=2, Hkv=2, Lq=200, Lk=100, causal=True),  # fully masked rows (bottom-right)
    dict(B=1, Hq=2, Hkv=2, Lq=130, Lk=190, causal=True, alignment="top_left"),
    dict(B=1, Hq=4, Hkv=2, Lq=190, Lk=260, window=(50, 20)),
    dict(B=2, Hq=2, Hkv=1, Lq=150, Lk=200, causal=True, seqlens_q=(150, 37), seqlens_k=(130, 200), nan=True),
    dict(B=1, Hq=2, Hkv=2, Lq=96, Lk=140, softcap=5.0, scale=0.5),
]


@pytest.mark.parametrize("deterministic", [False, True], ids=["any-order", "deterministic"])
@pytest.mark.parametrize("index", range(len(CASES)))
@pytest.mark.parametrize(("d", "dv"), [(256, 256), (192, 192), (192, 128)], ids=["256", "192", "192x128"])
def test_wide_schedule_model_matches_fp64_oracle(d, dv, index, deterministic):
    spec = dict(CASES[index])
    B, Hq, Hkv, Lq, Lk = (spec.pop(x) for x in ("B", "Hq", "Hkv", "Lq", "Lk"))
    nan = spec.pop("nan", False)
    spec.setdefault("scale", 1.0 / math.sqrt(d))
    rng = np.random.default_rng(1000 * index + d + dv)
    q, k = rng.standard_normal((B, Hq, Lq, d)), rng.standard_normal((B, Hkv, Lk, d))
    v, dout = rng.standard_normal((B, Hkv, Lk, dv)), rng.standard_normal((B, Hq, Lq, dv))
    o, lse = attention(q, k, v, **spec)
    dq_ref, dk_ref, dv_ref = attention_backward(q, k, v, dout, **spec)
    if nan:  # the padding holds NaN (SEMANTICS.md §7): the model must never read it
        q, k, v, dout = q.copy(), k.copy(), v.copy(), dout.copy()
        for b in range(B):
            q[b, :, spec["seqlens_q"][b]:] = dout[b, :, spec["seqlens_q"][b]:] = np.nan
            k[b, :, spec["seqlens_k"][b]:] = v[b, :, spec["seqlens_k"][b]:] = np.nan
    window = spec.pop("window", (None, None))
    dq, dk, dvv = wide_backward(q, k, v, dout, o, lse, window=window, deterministic=deterministic, **spec)
    for name, got, ref in (("dq", dq, dq_ref), ("dk", dk, dk_ref), ("dv", dvv, dv_ref)):
        assert np.isfinite(got).all(), name
        np.testing.assert_allclose(got, np.nan_to_num(ref), rtol=1e-9, atol=1e-9, err_msg=name)
    empty = np.isneginf(lse)
    assert (dq[empty] == 0).all(), "rows with no visible key: dq exactly 0"


def test_dq_blocks_balance_the_consumers():
    """The N-work of dK / dV plus dQ per consumer, averaged over two tiles: equal at every wide (d, dv)."""
    for d, dv in ((256, 256), (192, 192), (192, 128)):
        work = [0.0, 0.0]
        for it in range(2):
            for cw, own in ((0, d), (1, dv)):
                work[cw] += own + 64 * len(dq_blocks(d, dv, cw, it))
        assert work[0] == work[1], (d, dv, work)
        assert all(1 <= len(dq_blocks(d, dv, cw, it)) <= 2 for cw in (0, 1) for it in (0, 1))


def _float4_reds(block: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """bwd_wide.cuh BwdWideConsumer::atomic_dq_block with kDqFloat4, on one [64 x 64] dQ block: the accumulator layout
    (thread (warp, lane) holds element 4 j + 2 hh + e at row 16 warp + lane / 4 + 8 hh, column 8 j + 2 (lane % 4) + e),
    the swap between lanes 2t and 2t + 1 (__shfl_xor_sync(.., 1)), then each lane's float4 red: (row, first column,
    four values)."""
    acc = np.zeros((4, 32, 32))
    for warp in range(4):
        for lane in range(32):
            for j in range(8):
                for hh in range(2):
                    for e in range(2):
                        acc[warp, lane, 4 * j + 2 * hh + e] = block[16 * warp + lane // 4 + 8 * hh,
                                                                    8 * j + 2 * (lane % 4) + e]
    reds = []
    for warp in range(4):
        for j in range(8):
            sends = {}
            for lane in range(32):
                odd = lane & 1
                sends[lane] = (acc[warp, lane, 4 * j], acc[warp, lane, 4 * j + 1]) if odd else (
                    acc[warp, lane, 4 * j + 2], acc[warp, lane, 4 * j + 3])
            for lane in range(32):
                odd = lane & 1
                got = sends[lane ^ 1]
                own = acc[warp, lane, 4 * j + 2: 4 * j + 4] if odd else acc[warp, lane, 4 * j: 4 * j + 2]
                v = np.concatenate([got, own]) if odd else np.concatenate([own, got])
                row = 16 * warp + lane // 4 + (8 if odd else 0)
                reds.append((row, 8 * j + 4 * ((lane % 4) // 2), v))
    return reds


def test_float4_dq_reds_add_each_element_of_a_block_once():
    """The float4 dQ atomics (lab variant wide_dq_float4) write every element of a [64 x 64] block exactly once, with
    its own value: the two lanes of a pair hold rows r and r + 8 and swap the halves of each 8-column chunk."""
    block = np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
    out = np.zeros_like(block)
    hits = np.zeros(block.shape, dtype=int)
    reds = _float4_reds(block)
    assert len(reds) == 64 * 64 // 4
    for row, col, v in reds:
        assert col % 4 == 0, "16-byte aligned reds"
        out[row, col:col + 4] += v
        hits[row, col:col + 4] += 1
    assert (hits == 1).all()
    np.testing.assert_array_equal(out, block)


def _staging_uses(d: int, dv: int, tiles: int) -> list[tuple[int, int, int, int]]:
    """bwd_wide.cuh with DqStaging::kBufferPerConsumer: the writer's order of (tile, consumer w, block, use of buffer w)
    (bwd_wide_dq_writer: x over each consumer's blocks, w inside), the use being n_w it + x as both sides compute it."""
    out = []
    n = [len(dq_blocks(d, dv, w, 0)) for w in (0, 1)]
    for it in range(tiles):
        for x in range(max(n)):
            for w in (0, 1):
                if x < n[w]:
                    out.append((it, w, dq_blocks(d, dv, w, it)[x], n[w] * it + x))
    return out


@pytest.mark.parametrize(("d", "dv"), [(256, 256), (192, 128)])
def test_per_consumer_dq_staging_uses_each_buffer_in_order(d, dv):
    """Per-consumer dQ staging (the shipped d = 256 build): each consumer's blocks are the same every tile, each
    buffer's uses come 0, 1, 2, ... in the writer's order (so the mbarrier parities (use & 1) of full_dq and
    (use & 1) ^ 1 of empty_dq alternate), and every block of every tile is reduced exactly once."""
    assert all(dq_blocks(d, dv, w, 0) == dq_blocks(d, dv, w, 1) for w in (0, 1)), "no alternating block"
    uses = _staging_uses(d, dv, tiles=5)
    for w in (0, 1):
        assert [u for _, ww, _, u in uses if ww == w] == list(range(sum(1 for _, ww, _, _ in uses if ww == w)))
    for it in range(5):
        assert sorted(b for t, _, b, _ in uses if t == it) == list(range(d // 64))
