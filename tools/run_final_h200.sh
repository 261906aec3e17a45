#!/usr/bin/env bash
# One H200 device call for the side-by-side figures: flash-attn-4 installed from the vendored parts (see
# run_fa4.sh for the two-call parking protocol), the kernel library built beforehand on the CPU machine
# (python -m attention_conformance.kernels.build --out build/kernels, carried as build/kernels), then, each under its own time limit:
#   1. FA3 forward beside cuDNN, torch-flash and flash-attn-4 (tools/fa3_check_bench.py);
#   2. the HBM traffic table and the memory family (run_memory_h200.sh), FA3 and FA4 rows included;
#   3. the conformance gpu profile through flash-attn-4 (partial report kept when the limit hits).
# Results under $OUT/{fa3,mem,fa4}. Knobs: BENCH_S, MEM_S, CONF_S (seconds), FA4_IMPLS, CONF_K.
set -u
export PYTHONUNBUFFERED=1
VENDOR=${VENDOR:-.vendor}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/fa3" "$OUT/mem" "$OUT/fa4"
if [ -n "${LIB_ZST:-}" ]; then  # the library travels zstd-compressed (44 MB -> 3 MB): a call carries 64 MiB at most
    mkdir -p build/kernels
    LD_LIBRARY_PATH=$VENDOR/bin "$VENDOR/bin/zstd" -d -q -f "$LIB_ZST" -o build/kernels/libattn_kernels.so
    cp "$(dirname "$LIB_ZST")/build.stamp" build/kernels/ 2>/dev/null
fi
export ATTN_KERNELS_NO_BUILD=1
. "$(dirname "${BASH_SOURCE[0]}")/checkout_env.sh"  # import attention_conformance from this checkout
bash "$VENDOR/install.sh" || echo "flash-attn-4 install failed: FA4 rows will be skipped"
export PYTHONPATH=/tmp/site_vendor/nvidia_cutlass_dsl/dsl_packages:/tmp/site_vendor:${PYTHONPATH:-}
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4_jit_cache
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import importlib.metadata as m, torch; print('flash-attn-4', m.version('flash-attn-4'), '| torch',
torch.__version__, 'CUDA', torch.version.cuda, 'cuDNN', torch.backends.cudnn.version())" || true
timeout "${BENCH_S:-150}" python3 tools/fa3_check_bench.py --out "$OUT/fa3" --skip-check 2>&1 \
    | grep -v -e Warning -e _warn_once | tail -30
echo "fa3 bench rc=${PIPESTATUS[0]}"
OUT="$OUT/mem" SKIP_PYTEST=1 CONF_TIMEOUT=${MEM_S:-120} bash tools/run_memory_h200.sh 2>&1 | tail -30
IMPLS=${FA4_IMPLS:-"flash-attn-4"}
# shellcheck disable=SC2086
timeout "${CONF_S:-240}" python3 -m attention_conformance run --profile gpu --device cuda --impl $IMPLS \
    ${CONF_K:+-k "$CONF_K"} --timeout 180 --progress-every 10 --report-dir "$OUT/fa4" 2>&1 | tail -25
echo "conformance rc=${PIPESTATUS[0]}"
true
