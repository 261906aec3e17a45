#!/usr/bin/env bash
# One H200 device call of the conformance gpu profile (the current reports/gpu report is the union of such
# calls over disjoint adapter sets, joined with `python -m attention_conformance merge`). The kernel library is
# built beforehand on the CPU machine and travels zstd-compressed (LIB_ZST, 44 MB -> 3 MB); flash-attn-4 is
# installed from the vendored parts when VENDOR_INSTALL=1 (the parking protocol: run_fa4.sh). Knobs: IMPLS,
# WORKERS, CONF_S (seconds), CONF_K (a -k selection), NAME (the $OUT subfolder).
#   LIB_ZST=.carry/libattn_kernels.so.zst IMPLS="cuda-fa2 cuda-fa3" OUT=/tmp/out bash tools/run_gpu_profile_h200.sh
set -u
export PYTHONUNBUFFERED=1
VENDOR=${VENDOR:-.vendor}
OUT=${OUT:-/tmp/out}
NAME=${NAME:-conf}
mkdir -p "$OUT/$NAME"
if [ -n "${LIB_ZST:-}" ]; then
    mkdir -p build/kernels
    LD_LIBRARY_PATH=$VENDOR/bin "$VENDOR/bin/zstd" -d -q -f "$LIB_ZST" -o build/kernels/libattn_kernels.so
    cp "$(dirname "$LIB_ZST")/build.stamp" build/kernels/ 2>/dev/null
fi
export ATTN_KERNELS_NO_BUILD=1
. "$(dirname "${BASH_SOURCE[0]}")/checkout_env.sh"  # import attention_conformance from this checkout
if [ -n "${VENDOR_INSTALL:-}" ]; then
    bash "$VENDOR/install.sh" || echo "flash-attn-4 install failed: its adapter will be unavailable"
    export PYTHONPATH=/tmp/site_vendor/nvidia_cutlass_dsl/dsl_packages:/tmp/site_vendor:${PYTHONPATH:-}
    export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4_jit_cache
fi
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
IMPLS=${IMPLS:-"torch-sdpa-flash torch-sdpa-efficient torch-sdpa-cudnn torch-flex cuda-fa2 cuda-fa3"}
# shellcheck disable=SC2086
timeout "${CONF_S:-480}" python3 -m attention_conformance run --profile gpu --device cuda --impl $IMPLS \
    ${CONF_K:+-k "$CONF_K"} --workers "${WORKERS:-4}" --timeout 180 --progress-every 25 \
    --report-dir "$OUT/$NAME" > "$OUT/$NAME/log.txt" 2>&1
echo "conformance rc=$?"
grep -v -e Warning -e _warn_once "$OUT/$NAME/log.txt" | tail -40
rm -f "$OUT/$NAME/report.html"  # rebuilt on the CPU machine after the merge
true
