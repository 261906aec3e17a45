#!/usr/bin/env bash
# flash-attn-4 on the H200 (no package index there): install from the parts vendor_wheels.sh made, smoke-test
# every FA4 entry point (tools/fa4_smoke.py), then the conformance gpu profile through the
# flash-attn-4 adapter and each of its entry-point variants (conformance/README.md, "Entry points").
#
# Here (a machine with the package index), once, from the project root:
#     bash ../shared/tools/vendor_wheels.sh .vendor 40     # 2 parts: p1 ~40 MB, p2 ~30 MB (steering repo tool)
# On the GPU host, two device calls less than 30 s apart (/tmp survives that long between calls):
#   call 1, carry [".vendor/parts/p1", ".vendor/bin"]:
#       mkdir -p /tmp/park && cp .vendor/parts/p1/* .vendor/bin/* /tmp/park/
#   call 2, carry [".vendor/parts/p2", ".vendor/wheels", ".vendor/bin", ".vendor/install.sh"]:
#       bash tools/run_fa4.sh            # results under $OUT/fa4
# Knobs: VENDOR (default .vendor), SMOKE_S / RUN_S (time limits, s; SMOKE_S=0 skips the smoke test),
# FA4_IMPLS (adapter specs), FA4_K (-k), BENCH=1 (+ BENCH_S, BENCH_K: the pytest-benchmark rows).
set -u
export PYTHONUNBUFFERED=1
VENDOR=${VENDOR:-.vendor}
R=${OUT:-/tmp/out}/fa4; mkdir -p "$R"
bash "$VENDOR/install.sh" || { echo "install failed"; exit 3; }
export PYTHONPATH=/tmp/site_vendor/nvidia_cutlass_dsl/dsl_packages:/tmp/site_vendor:${PYTHONPATH:-}
. "$(dirname "${BASH_SOURCE[0]}")/checkout_env.sh"  # import attention_conformance from this checkout
# one on-disk JIT cache for the smoke test, the adapter's worker processes and its variants
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4_jit_cache
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import importlib.metadata as m, torch, flash_attn.cute as f; print('flash-attn-4', m.version('flash-attn-4'),
'| flash_attn.cute.__version__', f.__version__, '| nvidia-cutlass-dsl', m.version('nvidia-cutlass-dsl'),
'| torch', torch.__version__, 'CUDA', torch.version.cuda)"
if [ "${SMOKE_S:-90}" != 0 ]; then  # SMOKE_S=0 skips the smoke test (GNU timeout 0 would mean no limit)
    timeout "${SMOKE_S:-90}" python3 tools/fa4_smoke.py --out "$R" 2>&1 | tee "$R/smoke.log" \
        | grep -v -e Warning -e generate_mlir_function_types -e _warn_once
fi
IMPLS=${FA4_IMPLS:-"flash-attn-4 flash-attn-4@func flash-attn-4@varlen_func flash-attn-4@seqused flash-attn-4@paged flash-attn-4@deterministic"}
# shellcheck disable=SC2086
timeout "${RUN_S:-470}" python3 -m attention_conformance run --profile gpu --device cuda --impl $IMPLS \
    ${FA4_K:+-k "$FA4_K"} --timeout 180 --progress-every 10 --report-dir "$R" 2>&1 | tail -40
echo "conformance rc=${PIPESTATUS[0]}"
if [ "${BENCH:-0}" = 1 ]; then  # FA4 beside torch-flash and cuDNN (tests/kernels/test_cuda_bench.py, tox -e bench)
    timeout "${BENCH_S:-150}" python3 -m pytest -q -p no:cacheprovider -m benchmark_only --benchmark-enable \
        --benchmark-json="$R/bench.json" tests/kernels/test_cuda_bench.py \
        -k "${BENCH_K:-fwd_8k and (flash-attn-4 or torch-flash or torch-cudnn)}" 2>&1 | tail -15
    python3 tools/bench_table.py "$R/bench.json" > "$R/bench.md" && cat "$R/bench.md"
fi
