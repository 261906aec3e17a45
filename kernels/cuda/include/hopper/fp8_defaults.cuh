// The shipped schedules of the FA3 FP8 forward (fp8_config.cuh Fp8Schedule), for each head dim and V layout: the
// fastest measured on the H200 (docs/fp8.md has the table of the alternatives). attn_fa3_fp8_fwd runs these;
// the lab's builds (kernels/cuda/lab) derive from them.
//
// V as rows (the producer warpgroup transposes each tile): two consumer warpgroups, key tiles of 128 (64 at d = 256,
// where the fp32 O of 128 registers per thread leaves no room for a 128-key S beside the transposing warps' 56), Q in
// registers at d = 128.
// V k-major (attn_fp8_pack_vt): d = 64 and 128, three consumer warpgroups of 64 rows with 128-key tiles (a
// warpgroup's softmax then has two other warpgroups' GEMMs to hide under: 1.14x the two-warpgroup build with 192-key
// tiles at d = 128, 1.08-1.11x the one with 256-key tiles at d = 64); d = 64 with the persistent loop (1.03-1.05x one
// CTA per work tile, outputs bit-identical). d = 256: two warpgroups and 128-key tiles (O and S then exceed the 240
// registers and ptxas spills ~300 bytes, but since the mbarrier waits sleep it runs 1.15x the 64-key build).
// d = 96 and 192 (not yet timed against alternatives) take d = 128's and d = 256's shared-memory tiles (fp8_config.cuh
// fp8_smem_dim) and these schedules by the same reasoning: d = 96 as d = 128 with Q from shared memory (its register
// operand is a d = 128 build); d = 192 with two warpgroups (an fp32 O of 96 registers leaves no room for S beside it
// in the 160 of three), whose O, S and P of 128-key k-major tiles (96 + 64 + 16) fit the 240 registers without spills.
#pragma once
#include "fp8_config.cuh"

namespace attn::hopper {

template <int D>
struct Fp8RowsDefault : Fp8Schedule {
    static constexpr QOperand q_operand = D == 128 ? QOperand::kRegisters : QOperand::kSharedMemory;
};

template <int D>
struct Fp8KMajorDefault : Fp8Schedule {
    static constexpr VSource v_source = VSource::kKMajor;
    static constexpr int block_n = 128;
    static constexpr int consumer_warpgroups = D >= 192 ? 2 : 3;
    static constexpr Grid grid = D == 64 ? Grid::kPersistent : Grid::kOneCtaPerTile;
};

}  // namespace attn::hopper
