#!/usr/bin/env bash
# One device call for peak memory and HBM traffic: the ncu traffic table (tools/hbm_traffic.py),
# the conformance `memory` family (N, 2N, 4N) on every available CUDA adapter that claims linear memory plus
# torch's math backend, and the GPU tests of conformance/running/peak_memory.py. Needs the kernel library built beforehand
# (python -m attention_conformance.kernels.build) and $OUT set; writes 8 files under $OUT. SKIP_HBM=1 / SKIP_PYTEST=1 leave parts out.
#   OUT=/tmp/out bash tools/run_memory_h200.sh
set -u
export PYTHONUNBUFFERED=1
. "$(dirname "${BASH_SOURCE[0]}")/checkout_env.sh"  # import attention_conformance from this checkout
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
if [ -z "${SKIP_HBM:-}" ]; then
    timeout "${HBM_TIMEOUT:-240}" python3 tools/hbm_traffic.py --out /tmp/hbm --reps "${REPS:-5}" \
        --timeout "${HBM_CONFIG_TIMEOUT:-110}" > "$OUT/hbm_log.txt" 2>&1
    echo "hbm rc=$?"
    cp /tmp/hbm/hbm_traffic.json /tmp/hbm/hbm_traffic.md "$OUT/" 2>/dev/null
fi
IMPLS=$(python3 -c "
from attention_conformance.adapters.registry import load
names = ['torch-sdpa-math', 'torch-sdpa-flash', 'torch-sdpa-efficient', 'torch-sdpa-cudnn', 'cuda-fa1', 'cuda-fa2',
         'cuda-splitkv', 'cuda-fa3', 'flash-attn-2', 'flash-attn-3', 'flash-attn-4']
print(' '.join(n for n in names if load(n, 'cuda').available))")
echo "memory family on: $IMPLS"
timeout "${CONF_TIMEOUT:-150}" python3 -m attention_conformance run --profile gpu --device cuda -k memory --impl $IMPLS \
    --report-dir /tmp/conf --determinism none --timeout 60 --progress-every 1 > "$OUT/conf_log.txt" 2>&1
echo "conformance rc=$?"
tail -3 "$OUT/conf_log.txt"
cp /tmp/conf/report.json "$OUT/memory_report.json" 2>/dev/null
cp /tmp/conf/report.md "$OUT/memory_report.md" 2>/dev/null
sed -n '/^## Peak device memory/,/^## Failures/p' /tmp/conf/report.md
if [ -z "${SKIP_PYTEST:-}" ]; then
    timeout "${PYTEST_TIMEOUT:-60}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/conformance/test_memory_gpu.py \
        > "$OUT/pytest_gpu.txt" 2>&1
    echo "pytest rc=$?"
    tail -3 "$OUT/pytest_gpu.txt"
fi
tar czf "$OUT/extra.tgz" -C /tmp hbm conf 2>/dev/null
[ -f "$OUT/hbm_traffic.md" ] && sed -n '/^## /,$p' "$OUT/hbm_traffic.md"
true
