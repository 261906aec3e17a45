#!/usr/bin/env bash
# The H200 (no package index, ~64 MiB per call, /tmp kept while the machine stays warm) as a hardware runner
# would use it, in stages, one device call each, from the repository root:
#   park1 / park2  park a part of flash-attn-4's CUTLASS DSL (.vendor/, ../shared/tools/vendor_wheels.sh) and the
#                  test wheels (.wheels-test/, ../shared/tools/test_wheels.sh) in /tmp
#   install        FA4 and cudnn-frontend (.whl/) into the runner's torch venv, tox into /tmp/toxsite, this
#                  checkout (pip install -e, no index), the kernel library for sm_90a
#   cli [SPECS]    python -m attention_conformance run --profile gpu over SPECS (default: all) into /tmp/cli_NAME,
#                  in the background (setsid), so a later call collects it
#   tox            tox -e gpu exactly as tox.ini says, 8 workers, junit XML for the comparison, in the background
#                  (setsid: it outlasts one call's 10 minutes; measured 2026-12-04: ~9.5 min with FA4 installed)
#   tox-collect    wait for it (WAIT_S, default 540), copy its log and junit XML to $OUT
#   collect NAME   wait for the background CLI run NAME, copy its reports to $OUT
# Then, here: python tools/compare_front_ends.py gpu_junit.xml cli_all/report.json.gz
set -uo pipefail
stage=${1:?stage}
shift || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/park
export PYTHONUNBUFFERED=1
site() { python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
case "$stage" in
park1)
    cp .vendor/parts/p1/* .vendor/bin/* /tmp/park/ && mkdir -p /tmp/park/wheels-test && cp .wheels-test/* /tmp/park/wheels-test/
    ls /tmp/park | head ;;
park2)
    cp .vendor/parts/p2/* /tmp/park/ && ls /tmp/park | wc -l ;;
install)
    bash .vendor/install.sh || exit 1
    s=$(site)
    cp -r /tmp/site_vendor/. "$s"/ && echo "$s/nvidia_cutlass_dsl/dsl_packages" > "$s/cutlass_dsl_packages.pth"
    python3 -m pip install -q --no-index --no-deps .whl/nvidia_cudnn_frontend-*.whl
    python3 -m pip install -q --no-index --find-links /tmp/park/wheels-test --target /tmp/toxsite tox
    python3 -m pip install -q --no-deps --no-build-isolation -e .
    python3 -c "import flash_attn.cute, cudnn; print('flash-attn-4 and cudnn-frontend import')"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -m attention_conformance.kernels.build --out build/kernels --arch 90a 2>&1 | tail -3 ;;
cli)
    name=${CLI_NAME:-all}
    rm -rf "/tmp/cli_$name"; mkdir -p "/tmp/cli_$name"
    setsid bash -c "python3 -m attention_conformance run --profile gpu --device cuda --workers ${WORKERS:-8} \
        --impl ${*:-all} --report-dir /tmp/cli_$name --progress-every 50 > /tmp/cli_$name/log 2>&1; \
        echo \$? > /tmp/cli_$name/rc" < /dev/null > /dev/null 2>&1 &
    echo "started /tmp/cli_$name" ;;
collect)
    name=${1:-all}
    for _ in $(seq 1 "${WAIT_S:-540}"); do [ -f "/tmp/cli_$name/rc" ] && break; sleep 1; done
    tail -3 "/tmp/cli_$name/log"; echo "rc=$(cat /tmp/cli_$name/rc 2>/dev/null || echo running)"
    mkdir -p "$OUT/cli_$name" && cp /tmp/cli_$name/report.* /tmp/cli_$name/log "$OUT/cli_$name/" 2>/dev/null
    gzip -f "$OUT/cli_$name/report.json" 2>/dev/null; true ;;
tox)
    rm -rf /tmp/tox_run failures.txt failures.txt.durations && mkdir -p /tmp/tox_run
    setsid bash -c "start=\$(date +%s); PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/park/wheels-test CONFORMANCE_WORKERS=8 \
        PYTHONPATH=/tmp/toxsite python3 -m tox -e gpu -- --junitxml=/tmp/tox_run/gpu_junit.xml -p no:randomly \
        -p tools.pytest_stream_failures --durations=40 $* \
        > /tmp/tox_run/tox_gpu.log 2>&1; echo \$? > /tmp/tox_run/rc; echo \$(( \$(date +%s) - start )) > /tmp/tox_run/seconds" \
        < /dev/null > /dev/null 2>&1 &
    echo "started tox -e gpu in /tmp/tox_run" ;;
tox-collect)
    for _ in $(seq 1 "${WAIT_S:-540}"); do [ -f /tmp/tox_run/rc ] && break; sleep 1; done
    echo "tox -e gpu: exit $(cat /tmp/tox_run/rc 2>/dev/null || echo running) in $(cat /tmp/tox_run/seconds 2>/dev/null || echo '?') s"
    tail -5 /tmp/tox_run/tox_gpu.log; cp /tmp/tox_run/tox_gpu.log /tmp/tox_run/gpu_junit.xml failures.txt failures.txt.durations "$OUT/" 2>/dev/null
    true ;;
*) echo "unknown stage $stage"; exit 2 ;;
esac
