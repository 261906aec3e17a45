"""Device checks of the CUDA kernels, judged by the conformance judge.

A device check draws random inputs on the GPU, runs one launcher into outputs poisoned with NaN between sentinel
guard bands, and hands what the launcher wrote to `conformance.verdict.judge.judge` against the FP64 oracle, under the
a-priori bounds of conformance/TOLERANCES.md (`conformance.verdict.bounds`): the verdict the conformance engine gives an
adapter, with no tolerance of its own. What the judge does not see is checked beside it: writes past the output
(the guard bands), padded query rows written (attn_params.h: a launcher leaves them), inputs the launcher changed.

Modules, one job each:

- `cases`: the case lists of the FA3 backward and FA3 FP8 device checks;
- `guard`: output buffers between sentinel guard bands;
- `verdict`: a device case as a conformance `Case`, a launcher's outputs as the judge's input, the verdict;
- `forward`: the fp16 / bf16 forward launchers (FA2, split-KV, FA3);
- `backward`: the FA3 backward launchers, and the determinism of the deterministic one;
- `fp8`: the FA3 FP8 forward, judged, and its agreement with the NumPy FA3 FP8 model (kernels/reference/fa3.py).

Callers: the GPU tests of the CUDA kernels (tests/kernels/test_cuda_fwd_device.py, test_cuda_fa3_device.py, ...) and
the lab scripts of tools/. The CPU tests (tests/kernels/test_check_forward.py and its siblings) run these checks with
correct and deliberately broken kernels written in torch and NumPy.
"""

__all__: list[str] = []
