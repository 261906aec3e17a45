#!/usr/bin/env bash
# One device call of closing checks (issues 6 and 7): compute-sanitizer memcheck + racecheck over
# kernels.cuda.sanitize_cases, the backward correctness cases, the pytest-benchmark side-by-side run
# (what `tox -e bench` runs), then the conformance gpu profile with 1 and 2 workers
# (tools/run_workers.sh; needs a 2-GPU machine, skipped with WORKERS=0).
# Needs the library built beforehand (python -m attention_conformance.kernels.build; ATTN_KERNELS_LIB may point at it) and $OUT.
#   OUT=/tmp/out bash tools/run_final.sh
set -u
export PYTHONUNBUFFERED=1
. "$(dirname "${BASH_SOURCE[0]}")/checkout_env.sh"  # import attention_conformance from this checkout
R=/tmp/final; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for tool in memcheck racecheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 python3 -m attention_conformance.kernels.cuda.sanitize_cases \
        > $R/$tool.txt 2>&1
    echo "$tool rc=$?"; grep -E "^FAIL|ERROR SUMMARY|RACECHECK SUMMARY|sanitize_cases:" $R/$tool.txt | tail -3
done
timeout 120 python3 tests/kernels/test_cuda_bwd_device.py --out $R > $R/bwd_check.txt 2>&1
echo "bwd check rc=$?"; grep -E "PASS|FAIL" $R/bwd_check.txt | tail -4
tar czf $OUT/checks.tgz -C $R memcheck.txt racecheck.txt bwd_check.txt  # back even if a later step overruns
timeout 200 python3 -m pytest -q -p no:cacheprovider -m benchmark_only --benchmark-enable \
    --benchmark-json=$R/bench.json tests/kernels/test_cuda_bench.py > $R/bench_log.txt 2>&1
echo "bench rc=$?"; tail -2 $R/bench_log.txt
python3 tools/bench_table.py $R/bench.json > $OUT/bench.md && cat $OUT/bench.md
cp $R/bench.json $OUT/
if [ "${WORKERS:-1}" != 0 ]; then
    OUT=$R LIMIT=${LIMIT:-200} bash tools/run_workers.sh
    cp $R/workers.md $R/workers.json $OUT/ 2>/dev/null
    tar czf $OUT/workers.tgz -C $R w1 w2 w1.log w2.log
fi
