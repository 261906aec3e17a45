// Timing probes of the lab builds: schedule stages (hopper/schedule.cuh RunEveryStage) that leave one stage of a
// kernel's loop out, so that a probe build's time difference to the full build is what that stage costs on the
// critical path. Wrong results by design: never a shipped build, never judged for correctness.
#pragma once
#include "hopper/schedule.cuh"

namespace attn::lab {

using attn::hopper::RunEveryStage;

// The softmax without exponentials: p = the exponent itself (what the MUFU's ex2 costs).
struct NoExpStages : RunEveryStage {
    template <class Options>
    struct NoExp : Options {
        static __device__ __forceinline__ float exp2(float x, bool) { return x; }
    };
    template <class Options, class Softmax, int N>
    static __device__ __forceinline__ void softmax(Softmax& smx, float (&s)[N], float sl2, float (&corr)[2]) {
        smx.template online<NoExp<Options>>(s, sl2, corr);
    }
};

// No O += P V product.
struct NoPvStages : RunEveryStage {
    template <class Consumer, class O, class P>
    static __device__ __forceinline__ void pv(Consumer&, O&, const P&, int) {}
};

// No softmax at all (no maximum, exponentials, sums or rescale): P = S.
struct NoSoftmaxStages : RunEveryStage {
    template <class Options, class Softmax, int N>
    static __device__ __forceinline__ void softmax(Softmax&, float (&)[N], float, float (&corr)[2]) {
        corr[0] = corr[1] = 1.f;
    }
    template <class Consumer, class O, class Corr>
    static __device__ __forceinline__ void rescale(O&, const Corr&) {}
};

// The FP8 forward without its V transpose (the producer's warps 1-3 only pass the stages on).
struct NoTransposeStages : RunEveryStage {
    template <class T, class... Args>
    static __device__ __forceinline__ void transpose(Args...) {}
};

}  // namespace attn::lab
