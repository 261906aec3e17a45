#!/usr/bin/env bash
# Issue 7: the gpu profile with 2 workers (one GPU each) against 1 worker, on a 2-GPU host, plus the
# outcome comparison. Needs the CUDA library built (python -m attention_conformance.kernels.build) and $OUT set.
#   OUT=/tmp/out bash tools/run_workers.sh
set -u
export PYTHONUNBUFFERED=1
. "$(dirname "${BASH_SOURCE[0]}")/checkout_env.sh"  # import attention_conformance from this checkout
nvidia-smi -L
# A fresh machine's memory grows as it is first touched (about 3 s per 8 GiB, KINDS.md): touch
# ${WARM_GIB:-40} GiB once so neither timed run pays for that growth (a call that ran the 2-worker pass first on
# a fresh machine saw its large cases take twice as long as in the 1-worker pass).
python3 -c "import numpy as np, sys; a = np.ones(int(sys.argv[1]) << 27); print('warmed', a.nbytes >> 30, 'GiB')" \
    "${WARM_GIB:-40}"
IMPLS=${IMPLS:-"torch-sdpa-flash torch-sdpa-efficient torch-sdpa-cudnn cuda-fa2 cuda-splitkv cuda-fa1"}
for w in 1 2; do
    start=$(date +%s)
    timeout "${LIMIT:-280}" python3 -m attention_conformance run --profile gpu --device cuda --impl $IMPLS \
        --workers $w --timeout 120 --report-dir "$OUT/w$w" --progress-every 50 > "$OUT/w$w.log" 2>&1
    echo "workers=$w rc=$? wall=$(( $(date +%s) - start ))s"
    tail -2 "$OUT/w$w.log"
done
python3 tools/workers_compare.py "$OUT/w1/report.json" "$OUT/w2/report.json" \
    --json "$OUT/workers.json" | tee "$OUT/workers.md"
