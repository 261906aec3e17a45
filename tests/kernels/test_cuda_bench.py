"""pytest-benchmark measurements of the CUDA kernels beside torch SDPA (``tox -e bench`` on a GPU runner).

Marked ``benchmark_only`` and not ``gpu``: ``pytest -m gpu`` (``tox -e gpu``, the conformance run) selects none of
them. Each asks for the `bench` fixture, which skips the test with the reason before it makes any input when it
cannot measure: pytest-benchmark disabled (pyproject's addopts pass ``--benchmark-disable``; ``tox -e bench`` passes
``--benchmark-enable``), or the implementation missing here (our library not built, flash-attn-4 or cudnn-frontend
not importable); without CUDA the module skips.

Each benchmark times one call by pytest-benchmark's rounds (its wall clock around the call and a synchronize, >= 20
rounds after warm-up: the table it prints), then by `kernels.timing.measure` on the same call, whose figures go into
``extra_info``: ``gpu_ms`` (the headline: GPU time of one call without host launch overhead, by CUDA-graph replay
or, where the call cannot be captured, back-to-back launches: ``gpu_method``, ``gpu_fallback_reason``), ``host_us``
beside it (host time of one call, the median of ``host_samples_us``), ``wall_ms`` (event, call, event, synchronize:
the former figure, also kept as ``cuda_event_median_ms`` for bench_table.py), the SM clock and board power during
the samples, and the rate by GPU time (``tflops`` or ``TBps``: 4·B·H·Lq·Lk·d FLOPs, halved for causal, backward 2.5x
the forward; bytes of K and V for decoding; ``*_cuda_event`` and ``*_median`` the same by the wall time and by
pytest-benchmark's clock). Our kernels are called as a caller that launches them repeatedly would, through
`cuda_lib.bind` (the params struct filled and the workspace sized once, one foreign call per launch, capturable), as
the tables of tools/ do; the FA2 backward through `cuda_bwd_lib.backward`. The shapes are the issue-6 ones, with
torch SDPA's flash backend (vendored FA2), cuDNN and, when ``flash_attn.cute`` is importable (flash-attn-4;
tools/run_fa4.sh installs it on the H200), FA4's ``flash_attn_func`` timed on the same inputs in the same run: each
shape is one benchmark *group* (``--benchmark-group-by=group``), so the table pytest-benchmark prints puts ours,
torch-flash, cuDNN and FA4 side by side.

- FA2 forward, B=4, H=16, N=8192, d=128, bf16, causal and not;
- FA2 backward, same shape (o and LSE from our forward; torch's from its own forward);
- split-KV decoding, Lq=1, Lk=128k, Hq=32, Hkv=8, d=128;
- FA1 forward and backward at N=2048 (reported only, fp32 SIMT reference kernels);
- FA3 forward (attn_fa3_fwd, sm_90a) at B=4, H=16, N=8192, d = dv in {64, 96, 128, 192, 256} and (d, dv) = (192,
  128), causal and not; FA3 forward + backward (attn_fa3_fwd + attn_fa3_bwd; the others through autograd) on the same
  rows; the FA3 FP8 forward (attn_fa3_fp8_fwd, e4m3, per-tensor descales; V as rows and V k-major) at d in {128, 256}
  beside our BF16 FA3.

Benchmarks run one after another, so a ratio of two of them also carries whatever the card's clock did between
them (it sits at its power limit). The FA3 forward's cuDNN and FA4 benchmarks (and the forward + backward's FA4
one, 3 rounds) therefore also time ours and that implementation in alternating rounds on the same shape
(`kernels.timing.time_round_robin`, 5 rounds of `measure`, the order reversed every other round):
``extra_info["paired_ours_over_impl"]`` (speed of ours relative to it by GPU time, as the table's last column),
both spreads, host times and methods; bench_table.py prints it beside the sequential ratio.

The committed figures with correctness checks next to them come from
``tools/cuda_fwd_check_bench.py`` and ``tools/fa3_bwd_check_bench.py`` (its FA2 column)
(reports/benchmarks/cuda_fwd.md, fa3_bwd_side_by_side.md).
"""

from __future__ import annotations

import pytest

from attention_conformance.kernels.timing import measure, time_round_robin

torch = pytest.importorskip("torch")

# not marked gpu: the conformance run (pytest -m gpu) runs no benchmark; gpu_alone: beside other xdist workers on CUDA
# it has the GPU to itself (the plugin's pytest_runtest_call)
pytestmark = [
    pytest.mark.benchmark_only,
    pytest.mark.gpu_alone,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

B, H, N, D = 4, 16, 8192, 128
IMPLS = ("ours", "torch-flash", "torch-cudnn", "flash-attn-4")


def _missing(impl: str) -> str | None:
    """Why implementation `impl` cannot run here (None when it can): our library not loadable (for every ``ours*``),
    flash-attn-4 or cudnn-frontend not importable."""
    if impl.startswith("ours"):
        from attention_conformance.kernels import cuda_lib

        try:
            cuda_lib.library()
        except cuda_lib.LibraryUnavailable as exc:
            return f"our CUDA library is not loadable: {exc}"[:300]
    elif impl == "flash-attn-4":
        try:
            import flash_attn.cute  # noqa: F401
        except Exception as exc:  # ImportError, or a CuTe DSL that cannot load on this host
            return f"flash-attn-4 not importable: {type(exc).__name__}: {exc}"[:300]
    elif impl == "cudnn-fp8":
        from attention_conformance.adapters.cudnn_fp8 import cudnn_frontend

        try:
            cudnn_frontend()
        except ImportError as exc:
            return str(exc)[:300]
    return None


@pytest.fixture
def bench(benchmark, request):
    """pytest-benchmark's ``benchmark`` where it can measure; else the test skips with the reason before it makes any
    input: benchmarks disabled, or its ``impl`` (our library for a test without one) missing here."""
    if benchmark.disabled:
        reason = ("pytest-benchmark is disabled (--benchmark-disable, pyproject's default, or a pytest-xdist run); "
                  "tox -e bench passes --benchmark-enable")
    else:
        callspec = getattr(request.node, "callspec", None)
        reason = _missing(callspec.params.get("impl", "ours") if callspec else "ours")
    if reason:
        # pytest-benchmark marks a benchmark skipped only when the skip comes from the test's body; skipped here,
        # at set-up, it would warn that the fixture was never used
        benchmark.skipped = True
        pytest.skip(reason)
    return benchmark


def _fa4(q, k, v, causal: bool):
    """FA4's flash_attn_func on [B, N, H, D] copies of the [B, H, N, D] inputs (its native layout, made once)."""
    import flash_attn.cute as fa4  # importable: the bench fixture checked

    qt, kt, vt = (x.transpose(1, 2).contiguous().requires_grad_(x.requires_grad) for x in (q, k, v))

    def call():
        return fa4.flash_attn_func(qt, kt, vt, causal=causal)[0]

    call()
    return call, (qt, kt, vt)


def _synced(fn):
    def run():
        fn()
        torch.cuda.synchronize()

    return run


def _sdpa(backend_name: str, q, k, v, causal: bool, gqa: bool = False):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"torch-flash": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION}[backend_name]

    def call():
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    try:
        call()
    except RuntimeError as exc:  # a backend this torch build or GPU does not offer for the shape
        pytest.skip(f"{backend_name} unavailable for this shape: {exc}"[:200])
    return call


def _bench(benchmark, call, rounds: int, group: str, work: float, unit: str = "tflops") -> None:
    """pytest-benchmark rounds of `call` (synchronised inside the timed function), then `measure` of as many
    samples of the unsynchronised call: its figures, and the rate (`work` FLOPs, or bytes for unit="TBps") by GPU
    time, by wall time and by pytest-benchmark's clock, into extra_info (see the module docstring)."""
    benchmark.group = group
    fn = _synced(call)
    fn()
    benchmark.pedantic(fn, rounds=rounds, warmup_rounds=3)
    t = measure(call, reps=rounds, warmup=1)
    info = benchmark.extra_info
    info.update(gpu_ms=t.gpu_ms, host_us=t.host_us, host_queued_us=t.host_queued_us, wall_ms=t.wall_ms,
                # the drained host samples, not only their median: a row whose median sits far above the others'
                # (73 us against 20-35 for our forward + backward pair on an H100, 2026-12-07) shows its spread
                host_samples_us=[round(x, 2) for x in t.host_samples_us],
                gpu_method=t.method,
                calls_per_sample=t.calls_per_sample, host_bound_samples=t.host_bound_samples,
                sm_clock_mhz=t.sm_clock_mhz, power_w=t.power_w)
    if t.fallback_reason:
        info["gpu_fallback_reason"] = t.fallback_reason
    if t.telemetry_reason:
        info["telemetry_reason"] = t.telemetry_reason
    info[unit] = work / (t.gpu_ms * 1e-3) / 1e12
    info["cuda_event_median_ms"] = t.wall_ms  # the wall time under the name bench_table.py reads
    info[f"{unit}_cuda_event"] = work / (t.wall_ms * 1e-3) / 1e12
    info[f"{unit}_median"] = work / benchmark.stats.stats.median / 1e12


def _inputs(d: int, dv: int, n: int = 4):
    """Fresh B x H x N bf16 q, k (head dim d) and v (and, with n = 4, dout: head dim dv)."""
    return [torch.randn(B, H, N, d if i < 2 else dv, device="cuda", dtype=torch.bfloat16) for i in range(n)]


def _forward(impl: str, launcher: str, d: int, causal: bool, dv: int | None = None):
    """The forward of ``impl`` on fresh B x H x N x d bf16 inputs (v of head dim ``dv``, default d): ours through
    ``launcher``, else torch SDPA's backend or flash-attn-4."""
    from attention_conformance.kernels import cuda_lib

    q, k, v = _inputs(d, dv or d, 3)
    if impl == "ours":
        o = torch.empty_like(v)
        lse = torch.empty(B, H, N, device="cuda")
        p = cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)
        return cuda_lib.bind(launcher, p)  # the struct filled and the workspace sized once, as a caller would
    if impl == "flash-attn-4":
        return _fa4(q, k, v, causal)[0]
    return _sdpa(impl, q, k, v, causal)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fwd_8k_d128(bench, causal, impl):
    fn = _forward(impl, "attn_fa2_fwd", D, causal)
    _bench(bench, fn, 20, f"fa2-fwd B{B} H{H} N{N} d{D} {'causal' if causal else 'full'}",
           4 * B * H * N * N * D / (2 if causal else 1))


@pytest.mark.parametrize("impl", IMPLS)
def test_bwd_8k_d128(bench, impl):
    from attention_conformance.kernels import cuda_bwd_lib, cuda_lib

    q, k, v, dout = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    if impl == "ours":
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device="cuda")
        cuda_lib.call("attn_fa2_fwd", cuda_lib.fwd_params(q, k, v, o, lse))
        fn = lambda: cuda_bwd_lib.backward("attn_fa2_bwd", q, k, v, o, lse, dout)  # noqa: E731
    elif impl == "flash-attn-4":
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        call, (qt, kt, vt) = _fa4(qg, kg, vg, False)
        out, dout_t = call(), dout.transpose(1, 2).contiguous()
        fn = lambda: torch.autograd.grad(out, (qt, kt, vt), dout_t, retain_graph=True)  # noqa: E731
    else:
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        out = _sdpa(impl, qg, kg, vg, False)()
        fn = lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)  # noqa: E731
    _bench(bench, fn, 20, f"fa2-bwd B{B} H{H} N{N} d{D} full", 2.5 * 4 * B * H * N * N * D)


@pytest.mark.parametrize("impl", IMPLS)
def test_decode_128k(bench, impl):
    from attention_conformance.kernels import cuda_lib

    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8, 131072, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    if impl == "ours":
        o = torch.empty_like(q)
        lse = torch.empty(1, 32, 1, device="cuda")
        # caller-owned split partials (as a serving engine keeps them), split count from the library
        splits = cuda_lib.splitkv_num_splits(cuda_lib.fwd_params(q, k, v, o, lse))
        part_o = torch.empty(splits * 32 * 128, device="cuda")
        part_l = torch.empty(splits * 32, device="cuda")
        p = cuda_lib.fwd_params(q, k, v, o, lse, num_splits=splits, o_partial=part_o, lse_partial=part_l)
        fn = cuda_lib.bind("attn_splitkv_fwd", p)
    elif impl == "flash-attn-4":  # GQA native; sm90 FA4 has no split-KV (num_splits=1)
        fn, _ = _fa4(q, k, v, False)
    else:
        fn = _sdpa(impl, q, k, v, False, gqa=True)
    _bench(bench, fn, 30, "decode Lq1 Lk131072 Hq32 Hkv8 d128", 2 * 8 * 131072 * 128 * 2, unit="TBps")


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_fa1_2k_d128(bench, direction):
    from attention_conformance.kernels import cuda_bwd_lib

    n = 2048
    q, k, v, dout = (torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    if direction == "fwd":
        fn = lambda: cuda_bwd_lib.fa1_forward(q, k, v)  # noqa: E731
    else:
        o, lse = cuda_bwd_lib.fa1_forward(q, k, v)
        fn = lambda: cuda_bwd_lib.backward("attn_fa1_bwd", q, k, v, o, lse, dout)  # noqa: E731
    _bench(bench, fn, 20, f"fa1 B{B} H{H} N{n} d{D}", 4 * B * H * n * n * D * (2.5 if direction == "bwd" else 1.0))


def _is_hopper() -> bool:
    return torch.cuda.get_device_capability()[0] == 9


def _hopper():
    if not _is_hopper():
        pytest.skip("the FA3 kernels are built for sm_90a (Hopper)")


def _paired(benchmark, ours, theirs, work: float, rounds: int = 5) -> None:
    """Ours and `theirs` timed in alternating rounds (`time_round_robin`): the speed ratio ours / theirs by GPU time,
    both spreads (``paired_spreads``), host times (``paired_host_us``) and methods (``paired_method``) into
    `benchmark`'s extra_info (see the module docstring)."""
    row: dict = {}
    time_round_robin(row, [("ours", ours), ("theirs", theirs)], work, rounds)
    if "ours_ms" in row and "theirs_ms" in row:
        benchmark.extra_info["paired_ours_over_impl"] = row["theirs_ms"] / row["ours_ms"]
        benchmark.extra_info["paired_spreads"] = [row["ours_spread"], row["theirs_spread"]]
        for key in ("host_us", "method"):
            benchmark.extra_info[f"paired_{key}"] = [row["ours_" + key], row["theirs_" + key]]


#: the FA3 rows: (d, dv), d = dv, and DeepSeek's MLA prefill (192, 128); their ids keep the d = dv rows' names
FA3_DIMS = [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128)]
FA3_IDS = [str(d) if d == dv else f"{d}x{dv}" for d, dv in FA3_DIMS]


def _fa3_group(what: str, d: int, dv: int, causal: bool) -> str:
    return f"{what} B{B} H{H} N{N} d{d if d == dv else f'{d}x{dv}'} {'causal' if causal else 'full'}"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d, dv", FA3_DIMS, ids=FA3_IDS)
def test_fa3_fwd_8k(bench, d, dv, causal, impl):
    if impl == "ours":
        _hopper()
    fn = _forward(impl, "attn_fa3_fwd", d, causal, dv)
    work = 2 * B * H * N * N * (d + dv) / (2 if causal else 1)  # 4 B H N^2 d at dv = d
    _bench(bench, fn, 20, _fa3_group("fa3-fwd", d, dv, causal), work)
    if impl in ("torch-cudnn", "flash-attn-4") and _is_hopper() and _missing("ours") is None:
        _paired(bench, _forward("ours", "attn_fa3_fwd", d, causal, dv), fn, work)


def _forward_backward(impl: str, d: int, dv: int, causal: bool):
    """One forward and backward of ``impl`` on fresh inputs: ours as attn_fa3_fwd then attn_fa3_bwd (each bound
    once), flash-attn-4 and torch SDPA's backends through autograd (skipped where the backend refuses the shape)."""
    from attention_conformance.kernels import cuda_bwd_lib, cuda_lib

    q, k, v, dout = _inputs(d, dv)
    if impl == "ours":
        o = torch.empty_like(v)
        lse = torch.empty(B, H, N, device="cuda")
        dq, dk, dv_ = (torch.empty_like(x) for x in (q, k, v))
        pf = cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)
        pb = cuda_bwd_lib.bwd_params(q, k, v, o, lse, dout, dq, dk, dv_, causal=causal,
                                     **cuda_bwd_lib.bwd_scratch(q, k, v))
        fwd, bwd = cuda_lib.bind("attn_fa3_fwd", pf), cuda_lib.bind("attn_fa3_bwd", pb)
        return lambda: (fwd(), bwd())
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    if impl == "flash-attn-4":
        call, leaves = _fa4(qg, kg, vg, causal)
        dout_t = dout.transpose(1, 2).contiguous()
        return lambda: torch.autograd.grad(call(), leaves, dout_t)
    sdpa = _sdpa(impl, qg, kg, vg, causal)  # torch-flash refuses dv != d here; cuDNN's forward takes it

    def fn():
        return torch.autograd.grad(sdpa(), (qg, kg, vg), dout)

    try:
        fn()
    except RuntimeError as exc:  # a backward this backend does not offer for the shape
        pytest.skip(f"{impl} backward unavailable for this shape: {exc}"[:200])
    return fn


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d, dv", FA3_DIMS, ids=FA3_IDS)
def test_fa3_fwd_bwd_8k(bench, d, dv, causal, impl):
    """Forward + backward (issue 40's second bar, >= 0.95x flash-attn-4 on every row): FA4's benchmark also times ours
    and FA4 in 3 alternating rounds on the same shape (``paired_ours_over_impl``; cuDNN's is not paired here, nor
    are the rounds 5 as the forward's: the d = 256 row's call takes ~36 ms of wall time, fa3_bwd_side_by_side.md)."""
    if impl == "ours":
        _hopper()
    fn = _forward_backward(impl, d, dv, causal)
    # the forward's 2 B H N^2 (d + dv) and the backward's 2 B H N^2 (3 d + 2 dv): 3.5x 4 B H N^2 d at dv = d
    work = 2 * B * H * N * N * (4 * d + 3 * dv) / (2 if causal else 1)
    _bench(bench, fn, 20, _fa3_group("fa3-fwd+bwd", d, dv, causal), work)
    if impl == "flash-attn-4" and _is_hopper() and _missing("ours") is None:
        _paired(bench, _forward_backward("ours", d, dv, causal), fn, work, rounds=3)


@pytest.mark.parametrize("impl", ["ours-fp8-vt", "ours-fp8", "ours-bf16", "cudnn-fp8"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [128, 256])
def test_fa3_fp8_fwd_8k(bench, d, causal, impl):
    """ours-fp8: V as rows (transposed in the kernel); ours-fp8-vt: V packed k-major by attn_fp8_pack_vt beforehand
    (outside the timed call; one pass over V, reported by fa3_fp8_check_bench); ours-bf16: our BF16 FA3; cudnn-fp8:
    cuDNN's own FP8 forward on the same codes (conformance/adapters/cudnn_fp8_timed.py; needs cudnn-frontend, the
    ``cudnn`` extra), also paired with ours-fp8-vt in alternating rounds."""
    from attention_conformance.kernels import cuda_lib

    _hopper()
    x = [torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    o = torch.empty_like(x[0])
    lse = torch.empty(B, H, N, device="cuda")
    x8 = [t.to(torch.float8_e4m3fn) for t in x]
    ones = [torch.ones((), device="cuda") for _ in range(3)]

    def ours_fp8(v_layout: str):
        v8 = cuda_lib.pack_vt(x8[2]) if v_layout == "kmajor" else x8[2]
        p = cuda_lib.fp8_fwd_params(x8[0], x8[1], v8, o, lse, *ones, format="e4m3fn", granularity="per_tensor",
                                    causal=causal, v_layout=v_layout)
        return cuda_lib.bind("attn_fa3_fp8_fwd", p)

    work = 4 * B * H * N * N * d / (2 if causal else 1)
    if impl == "cudnn-fp8":
        from attention_conformance.adapters.cudnn_fp8_timed import CudnnFp8Unavailable, cudnn_fp8

        try:
            c8 = cudnn_fp8(*x8, causal)
        except CudnnFp8Unavailable as e:
            pytest.skip(str(e))
        fn = c8.run
        bench.extra_info["cudnn_fp8"] = f"{c8.version}, {c8.o_dtype} output {c8.bf16_declined}".strip()
        if _missing("ours") is None:
            _paired(bench, ours_fp8("kmajor"), fn, work)
    elif impl.startswith("ours-fp8"):
        fn = ours_fp8("kmajor" if impl == "ours-fp8-vt" else "rows")
    else:
        fn = cuda_lib.bind("attn_fa3_fwd", cuda_lib.fwd_params(*x, o, lse, causal=causal))
    _bench(bench, fn, 20, f"fa3-fp8-fwd B{B} H{H} N{N} d{d} {'causal' if causal else 'full'}", work)
