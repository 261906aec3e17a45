"""CPU tests of the FA3 forward's tile scheduling (kernels/planning.py, mirroring hopper/scheduler.cuh) and of
hopper/plan.cuh's masked_tiles against mask.cuh's per-tile test (both compiled for the host with nvcc).

The seed's load-balancing example (FA3, longest processing time first): in index order three SMs end
with loads [9, 5, 6]; longest first, [7, 7, 6]. The kernel's own enumeration (`fa3_tile_order`) must be
longest first under a causal mask and a permutation of all work tiles.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from attention_conformance.kernels.planning import fa3_tile_order, greedy_loads, lpt_order


def _host_program(tmp_path, name: str, source: str, *flags: str) -> Callable[..., str]:
    """`source` (C++ including kernels/cuda/include headers) compiled for the host with nvcc; returns a function that
    runs it with the given arguments and returns its stdout. Skips the test where nvcc is missing."""
    from attention_conformance.kernels.build import CUDA_DIR, find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    src, exe = tmp_path / f"{name}.cu", tmp_path / name
    src.write_text(source)
    subprocess.run([nvcc, "-std=c++17", *flags, "-I", str(CUDA_DIR / "include"), str(src), "-o", str(exe)], check=True,
                   capture_output=True)
    return lambda *args: subprocess.run([str(exe), *map(str, args)], check=True, capture_output=True,
                                        text=True).stdout


def test_seed_example_in_order_and_longest_first():
    costs = [m + 1 for b in range(2) for m in range(4)]  # two sequences, causal tile m sees m + 1 key tiles
    assert greedy_loads(costs, 3) == [9, 5, 6]
    assert greedy_loads([costs[i] for i in lpt_order(costs)], 3) == [7, 7, 6]


def test_kernel_order_reproduces_the_seed_example():
    order = fa3_tile_order(num_m=4, heads=1, batch=2, section=2)
    assert greedy_loads([m + 1 for m, _, _ in order], 3) == [7, 7, 6]


@pytest.mark.parametrize("num_m,heads,batch,section", [(5, 3, 2, 4), (1, 1, 1, 1), (7, 16, 4, 6), (3, 2, 2, 100),
                                                        (4, 5, 1, 2)])
def test_kernel_order_is_a_permutation_longest_first_per_section(num_m, heads, batch, section):
    section = min(section, heads * batch)
    order = fa3_tile_order(num_m, heads, batch, section)
    assert sorted(order) == sorted((m, h, b) for m in range(num_m) for h in range(heads) for b in range(batch))
    sections = max(heads * batch // section, 1)  # the last one takes the remainder
    starts = [s * section * num_m for s in range(sections)] + [len(order)]
    for lo, hi in zip(starts, starts[1:], strict=False):
        ms = [m for m, _, _ in order[lo:hi]]
        assert ms == sorted(ms, reverse=True), "tiles must run from the last to the first in a section"
    assert hi - lo >= section * num_m, "the last section is never smaller than the others"


@pytest.mark.parametrize("heads,section", [(64, 1), (64, 2), (63, 2), (64, 3), (16, 4)])
def test_backward_key_tile_order_balances_a_causal_grid(heads, section):
    """The FA3 backward takes key tile num_m - 1 - m: under a causal mask key tile n of 64 sees 64 - n query
    tiles, so sections of two heads or more end the grid with the short CTAs (132 SMs, greedy hand-out)."""
    n = 64
    order = fa3_tile_order(n, heads, 1, section)
    loads = greedy_loads([n - (n - 1 - m) for m, _, _ in order], 132)
    ideal = sum(n - k for k in range(n)) * heads / 132
    if section >= 2:
        assert ideal / max(loads) > 0.98
    else:  # one head per section: each head's long CTAs start behind the previous head's short ones
        assert ideal / max(loads) < 0.975


def test_greedy_ties_and_errors():
    assert greedy_loads([3, 3, 3], 3) == [3, 3, 3]
    assert greedy_loads([], 2) == [0, 0]
    with pytest.raises(ValueError, match="workers"):
        greedy_loads([1], 0)
    with pytest.raises(ValueError, match="costs"):
        greedy_loads([-1], 1)


_ORDER_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "hopper/scheduler.cuh"
int main(int argc, char** argv) {
    attn::hopper::TileOrder o{atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4])};
    for (int t = 0; t < o.total(); ++t) {
        attn::hopper::WorkTile w = o.at(t);
        printf("%d %d %d\n", w.m_block, w.h, w.b);
    }
    return 0;
}
"""


def test_python_mirror_matches_the_kernels_tile_order(tmp_path):
    """`fa3_tile_order` against ``TileOrder::at`` itself (compiled for the host with nvcc)."""
    run = _host_program(tmp_path, "order", _ORDER_PROGRAM)
    for args in ((5, 3, 2, 4), (7, 16, 4, 6), (1, 1, 1, 1), (3, 2, 2, 4), (4, 5, 1, 2), (2, 7, 1, 3)):
        out = run(*args)
        got = [tuple(int(x) for x in line.split()) for line in out.splitlines()]
        assert got == fa3_tile_order(*args), f"TileOrder{args} and fa3_tile_order{args} differ"


_MASKED_TILES_PROGRAM = r"""
#include <cstdio>
#include "hopper/plan.cuh"
// Every contiguous run of key tiles [n_hi - nt, n_hi) of every mask below, for every 64-row block of rows (also past
// the length): masked_tiles(...).at(x) must equal tile_needs_mask(n_hi - 1 - x). Prints the configurations checked,
// the mismatches and how many had masked tiles at both ends of the loop with unmasked ones between.
int main() {
    const int lens[] = {0, 1, 63, 64, 65, 200, 333, 1000};
    const int lefts[] = {-1, 0, 5, 100, 400}, rights[] = {-1, 0, 3, 70}, bns[] = {64, 80, 128, 176};
    long long checked = 0, bad = 0, both_ends = 0;
    for (int lq : lens) for (int lk : lens) for (int br = 0; br < 2; ++br)
    for (int left : lefts) for (int right : rights) for (int bn : bns) {
        attn::MaskInfo m{lq, lk, br ? lk - lq : 0, left, right};
        for (int i_lo = 0; i_lo <= lq + 64; i_lo += 64) {
            const int i_hi = (i_lo + 63 < lq - 1 ? i_lo + 63 : lq - 1);
            for (int n_hi = 0; n_hi <= (lk + bn - 1) / bn + 1; ++n_hi)
                for (int nt = 0; nt <= n_hi; ++nt) {
                    const attn::hopper::MaskedTiles t = attn::hopper::masked_tiles(m, n_hi, nt, bn, i_lo, i_hi);
                    ++checked;
                    for (int x = 0; x < nt; ++x) bad += t.at(x) != m.tile_needs_mask(n_hi - 1 - x, bn, i_lo, i_hi);
                    both_ends += t.x_lo > 0 && t.x_hi < nt && t.x_lo < t.x_hi;
                }
        }
    }
    printf("%lld %lld %lld\n", checked, bad, both_ends);
    return 0;
}
"""


def test_masked_tiles_bounds_match_the_per_tile_mask_test(tmp_path):
    """The FA3 forward decides once per work tile which key tiles need per-element masks (plan.cuh masked_tiles: a
    prefix and a suffix of its loop); for any lengths, alignment, window and key-tile width that must be exactly the
    tiles mask.cuh's tile_needs_mask names."""
    checked, bad, both_ends = map(int, _host_program(tmp_path, "masked", _MASKED_TILES_PROGRAM, "-O2")().split())
    assert checked > 100_000 and both_ends > 1000, (checked, both_ends)
    assert bad == 0, f"{bad} key tiles where masked_tiles and tile_needs_mask disagree"


_MASK_TILE_PROGRAM = r"""
#include <cstdio>
#include "hopper/plan.cuh"
// plan.cuh mask_tile against mask.cuh's visible() for every score one thread holds (rows row and row + 8, columns
// col0 + 8 c + {0, 1}), every row of every key tile, the four column offsets of a quad: lengths, both alignments,
// windows (edges past the int32 range included), key tiles of 64 to 256. Prints the scores checked and the mismatches.
template <int BN>
void run(long long& checked, long long& bad) {
    const int lens[] = {0, 1, 7, 64, 65, 333};
    const int lefts[] = {-1, 0, 5, 100, 2147483647}, rights[] = {-1, 0, 3, 70, 2147483600};
    for (int lq : lens) for (int lk : lens) for (int br = 0; br < 2; ++br)
    for (int left : lefts) for (int right : rights) {
        const attn::MaskInfo m{lq, lk, br ? lk - lq : 0, left, right};
        for (int row = 0; row < lq + 16; ++row)
            for (int n = 0; n * BN < lk + BN; ++n)
                for (int t = 0; t < 4; ++t) {
                    float s[BN / 2];
                    for (int e = 0; e < BN / 2; ++e) s[e] = 1.f;
                    const int col0 = n * BN + 2 * t;
                    attn::hopper::mask_tile<BN>(s, m, row, col0);
                    for (int e = 0; e < BN / 2; ++e) {
                        ++checked;
                        bad += (s[e] == 1.f) != m.visible(row + 8 * ((e / 2) % 2), col0 + 8 * (e / 4) + (e % 2));
                    }
                }
    }
}
int main() {
    long long checked = 0, bad = 0;
    run<64>(checked, bad);
    run<80>(checked, bad);
    run<128>(checked, bad);
    run<176>(checked, bad);
    run<192>(checked, bad);
    run<256>(checked, bad);
    printf("%lld %lld\n", checked, bad);
    return 0;
}
"""


def test_mask_tile_matches_visible_for_every_score(tmp_path):
    """The FA3 forwards (BF16 and FP8) mask a key tile by comparing each score's compile-time column with its row's
    visible-key interval (plan.cuh mask_tile, MaskInfo key_lo / key_hi); that must be exactly mask.cuh's visible() for
    every score, length, alignment and window. Mutants `c <= lo` and an unclamped key_hi give 0.7 M and 29 M
    mismatches."""
    checked, bad = map(int, _host_program(tmp_path, "mask_tile", _MASK_TILE_PROGRAM, "-O1")().split())
    assert checked > 100_000_000, checked
    assert bad == 0, f"{bad} scores where mask_tile and visible() disagree"


_CLUSTER_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "hopper/scheduler.cuh"
int main(int argc, char** argv) {
    attn::hopper::TileOrder o{atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4])};
    const int grid = attn::hopper::cluster_grid(o);
    printf("%d\n", grid);
    for (int t = 0; t < grid; ++t) {
        const attn::hopper::ClusterTile c = attn::hopper::cluster_tile(o, t);
        printf("%d %d %d %d %d\n", c.w.m_block, c.w.h, c.w.b, c.paired, c.idle);
    }
    return 0;
}
"""


@pytest.mark.parametrize("num_m,heads,batch,section", [(43, 16, 4, 2), (64, 16, 4, 1), (1, 3, 1, 1), (2, 1, 1, 1),
                                                        (5, 3, 3, 4), (7, 1, 1, 1)])
def test_cluster_tiles_cover_every_work_tile_once_in_pairs_that_share_keys(tmp_path, num_m, heads, batch, section):
    """Cluster launches (hopper/scheduler.cuh cluster_tile): CTAs 2c and 2c + 1 share their K / V loads when `paired`,
    so a paired cluster must hold query tiles m, m + 1 of one head; every work tile runs exactly once, and only the
    last CTA of the grid may be idle."""
    out = _host_program(tmp_path, "cluster", _CLUSTER_PROGRAM)(num_m, heads, batch, section).splitlines()
    grid, rows = int(out[0]), [tuple(int(x) for x in line.split()) for line in out[1:]]
    assert grid % 2 == 0 and len(rows) == grid
    busy = [(m, h, b) for m, h, b, _, idle in rows if not idle]
    assert sorted(busy) == sorted((m, h, b) for m in range(num_m) for h in range(heads) for b in range(batch))
    assert [i for i, r in enumerate(rows) if r[4]] in ([], [grid - 1])
    for c in range(grid // 2):
        a, b = rows[2 * c], rows[2 * c + 1]
        assert a[3] == b[3], f"cluster {c}: one CTA paired, the other not"
        if a[3]:
            assert (a[1], a[2]) == (b[1], b[2]) and b[0] == a[0] + 1, f"cluster {c}: {a} and {b} do not share keys"
    pairs = sum(r[3] for r in rows) // 2
    assert pairs == num_m // 2 * heads * batch
