// The named choices a Hopper kernel's schedule is made of (CUTLASS names its kernel schedules as tag types; here a
// schedule is a traits struct whose members take these values, so a configuration says what it changes by name and
// never by position). The FP16 / BF16 forward's schedules are config.cuh's, the FP8 forward's fp8_config.cuh's, the
// backward's bwd_mainloop.cuh's; the shipped builds of each head dim are the launchers' (fa3_fwd.cu, fa3_fp8_fwd.cu,
// fa3_bwd.cu), the ablation and tuning builds the lab's (kernels/cuda/lab).
#pragma once

#include "../launch_common.cuh"

namespace attn::hopper {

// Which threads issue the TMA loads: one thread of a producer warpgroup beside the consumers (warp specialisation, with
// setmaxnreg moving registers from the producer to the consumers), or thread 0 of the first consumer warpgroup between
// its own GEMMs.
enum class Loads { kProducerWarpgroup, kConsumerThreadZero };

// How the CTAs cover the work tiles: one CTA per work tile; #SMs CTAs looping over tiles taken from a global counter
// (scheduler.cuh); or one CTA per work tile in clusters of two on adjacent query tiles of a head that share every K / V
// load (TMA multicast; only where every query tile sees the same keys).
enum class Grid { kOneCtaPerTile, kPersistent, kCluster2 };

// When O is rescaled by a row's new maximum: after every key tile (eager), or only where a row's maximum moved by more
// than 2^8 in P, skipped in a warp whose rows all kept theirs (lazy; exact in real arithmetic, softmax.cuh).
enum class Rescale { kEager, kLazy };

// Where S = Q K^T reads Q from: shared memory (SS wgmma), or registers loaded once per work tile (RS wgmma: the tensor
// cores then fetch only K from shared memory, at the cost of the registers).
enum class QOperand { kSharedMemory, kRegisters };

// The N of O += P V: dv in whole 64-column blocks of shared memory (d = 96: m64n128, whose last 32 columns of O are
// padding), or dv itself (d = 96: m64n96, which reads the second block's first 32 columns: a quarter less tensor work
// and 16 fewer accumulator registers per thread).
enum class PvColumns { kWholeBlocks, kHeadDim };

// ScoreScale (launch_common.cuh, namespace attn): how the score scale reaches the softmax, chosen per call by the
// launcher; the FA2 kernels use the same type.

// The stages of a kernel's key-tile loop, each run as the kernel gives it. The mainloops call these stages through
// their schedule's `Stages` type and hold no timing logic: a timing build of the lab (kernels/cuda/lab/probes.cuh)
// gives a type that leaves one stage out, so that its time difference to the full build is what that stage costs on
// the critical path. (Plain calls, no lambdas: the PTX of the shipped kernels is the same as with the stages written
// in place.)
struct RunEveryStage {
    // The online softmax of a score tile with the config's softmax options (softmax.cuh RowSoftmax::online); a probe
    // may run it with other options (no exponentials) or leave it out (rescale factors of 1).
    template <class Options, class Softmax, int N>
    static __device__ __forceinline__ void softmax(Softmax& smx, float (&s)[N], float sl2, float (&corr)[2]) {
        smx.template online<Options>(s, sl2, corr);
    }
    // O *= the rescale factors: the consumer's rescale_o.
    template <class Consumer, class O, class Corr>
    static __device__ __forceinline__ void rescale(O& o, const Corr& corr) {
        Consumer::rescale_o(o, corr);
    }
    // O += P V: the consumer's gemm_pv.
    template <class Consumer, class O, class P>
    static __device__ __forceinline__ void pv(Consumer& cs, O& o, const P& pa, int stage) {
        cs.gemm_pv(o, pa, stage);
    }
    // The FP8 forward's V transpose of one tile in shared memory (the producer warpgroup's warps 1-3): T::run.
    template <class T, class... Args>
    static __device__ __forceinline__ void transpose(Args... args) {
        T::run(args...);
    }
};

}  // namespace attn::hopper
