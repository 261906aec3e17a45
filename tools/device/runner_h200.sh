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
#                  (setsid: it outlasts one call's 10 minutes); failures and durations stream to /tmp/tox_run (not the
#                  checkout: every device call re-sends the working tree, which removes files this tree lacks)
#   tox-collect    wait for it (WAIT_S, default 540), copy its log and junit XML to $OUT
#   collect NAME   wait for the background CLI run NAME, copy its reports to $OUT
#   validate       in the background (/tmp/val, a log per step, steps in order of need): the kernel device tests
#                  selected by VALIDATE_K (pytest -k) beside the gpu profile through the CUDA adapters, then the
#                  sanitizers on the kernels' case set, then the GPU-time benchmarks (FA3 forward with FA4 and cuDNN,
#                  FP8 forward, FA3 backward, FA2 forward and split-KV decode); val-collect copies what has finished
#   session        all of it in one background pipeline (tox, CLI, variants, sanitizers, FlashInfer and xformers
#                  where `VENDOR=.vendor-fi-xf bash tools/device/fi_xf.sh check` installed them, benchmarks, an ncu
#                  profile; limits TOX_S, CLI_S, VARIANTS_S, FIXF_S); session-collect (WAIT_S, UNTIL=step) copies
#                  what has finished
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
    rm -rf /tmp/tox_run && mkdir -p /tmp/tox_run
    setsid bash -c "start=\$(date +%s); STREAM_FAILURES=/tmp/tox_run/failures.txt PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/park/wheels-test CONFORMANCE_WORKERS=8 \
        PYTHONPATH=/tmp/toxsite python3 -m tox -e gpu -x testenv:gpu.pass_env=STREAM_FAILURES -- --junitxml=/tmp/tox_run/gpu_junit.xml -p no:randomly \
        -p tools.pytest_stream_failures --durations=40 $* \
        > /tmp/tox_run/tox_gpu.log 2>&1; echo \$? > /tmp/tox_run/rc; echo \$(( \$(date +%s) - start )) > /tmp/tox_run/seconds" \
        < /dev/null > /dev/null 2>&1 &
    echo "started tox -e gpu in /tmp/tox_run" ;;
tox-collect)
    for _ in $(seq 1 "${WAIT_S:-540}"); do [ -f /tmp/tox_run/rc ] && break; sleep 1; done
    echo "tox -e gpu: exit $(cat /tmp/tox_run/rc 2>/dev/null || echo running) in $(cat /tmp/tox_run/seconds 2>/dev/null || echo '?') s"
    tail -5 /tmp/tox_run/tox_gpu.log; cp /tmp/tox_run/tox_gpu.log /tmp/tox_run/gpu_junit.xml /tmp/tox_run/failures.txt* "$OUT/" 2>/dev/null
    true ;;
validate)
    rm -rf /tmp/val && mkdir -p /tmp/val
    setsid bash -c '
        step() { name=$1; lim=$2; shift 2; s=$(date +%s); timeout "$lim" "$@" > /tmp/val/$name.log 2>&1
                 echo "$name: exit $? in $(( $(date +%s) - s )) s" >> /tmp/val/steps; }
        export PYTHONPATH=tools
        python3 -m pytest -q -p no:randomly -m gpu tests/kernels -k "${VALIDATE_K:-fa3}" > /tmp/val/kernels.log 2>&1 &
        step cuda 240 python3 -m attention_conformance run --profile gpu --device cuda --workers 8 --report-dir /tmp/val/cuda \
            --impl cuda-fa1 cuda-fa2 cuda-splitkv cuda-fa3 cuda-fa3-fp8 cuda-fa3-fp8-vt --quiet
        wait; echo "kernels: $(tail -1 /tmp/val/kernels.log)" >> /tmp/val/steps
        step fa3 200 python3 tools/fa3_check_bench.py --skip-check --previous reports/benchmarks/fa3_side_by_side.json --out /tmp/val/fa3
        step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m attention_conformance.kernels.cuda.sanitize_cases ${SANITIZE_KERNELS:-}
        step fp8 150 python3 tools/fa3_fp8_check_bench.py --bench --out /tmp/val/fp8
        step bwd 200 python3 tools/fa3_bwd_check_bench.py --no-check --only fa3,flash,cudnn,fa4 --head-dims ${BWD_DIMS:-64,128} --out /tmp/val/bwd
        step fwd 150 python3 tools/cuda_fwd_check_bench.py --skip-check --out /tmp/val/fwd
        step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -m attention_conformance.kernels.cuda.sanitize_cases ${SANITIZE_KERNELS:-}
        echo done >> /tmp/val/steps' < /dev/null > /dev/null 2>&1 &
    echo "started validate in /tmp/val" ;;
session)
    # the whole H200 plan of a session in the background, in order of need, each step with its own time limit, so
    # that the device time goes to the work rather than to round trips: tox -e gpu (the hardware-runner path),
    # the CLI over the same adapters (the comparison), the entry-point variants (the GPU report), the sanitizers,
    # then the GPU-time benchmarks (with FlashInfer / xformers rows where fi_xf.sh installed them); step logs and a
    # line per step in /tmp/session/steps; session-collect copies what has finished
    rm -rf /tmp/session /tmp/tox_run && mkdir -p /tmp/session /tmp/tox_run
    V=""
    for b in math flash efficient cudnn; do for e in is_causal bool_mask causal_upper_left causal_lower_right; do
        V="$V torch-sdpa-$b@$e"; done; done
    for e in func varlen_func seqused paged deterministic; do V="$V flash-attn-4@$e"; done
    FX=$(python3 -c "from attention_conformance.adapters.registry import entry_point_names as e
print(' '.join(e('flashinfer') + e('xformers')))" 2>/dev/null)
    setsid bash -c '
        step() { name=$1; lim=$2; shift 2; s=$(date +%s); timeout "$lim" "$@" > /tmp/session/$name.log 2>&1
                 echo "$name: exit $? in $(( $(date +%s) - s )) s" >> /tmp/session/steps; }
        step tox '"${TOX_S:-600}"' env STREAM_FAILURES=/tmp/tox_run/failures.txt PIP_NO_INDEX=1 \
            PIP_FIND_LINKS=/tmp/park/wheels-test CONFORMANCE_WORKERS=8 PYTHONPATH=/tmp/toxsite python3 -m tox -e gpu \
            -x testenv:gpu.pass_env=STREAM_FAILURES -- --junitxml=/tmp/tox_run/gpu_junit.xml -p no:randomly \
            -p tools.pytest_stream_failures --durations=40
        step cli '"${CLI_S:-600}"' python3 -m attention_conformance run --profile gpu --device cuda --workers 8 \
            --impl all --report-dir /tmp/session/cli_all --progress-every 50
        step variants '"${VARIANTS_S:-480}"' python3 -m attention_conformance run --profile gpu --device cuda \
            --workers 8 --impl '"$V"' --report-dir /tmp/session/cli_variants --progress-every 50
        step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
            python3 -m attention_conformance.kernels.cuda.sanitize_cases
        step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 1 \
            python3 -m attention_conformance.kernels.cuda.sanitize_cases
        if [ -f /tmp/fx-site/.done ]; then  # FlashInfer and xformers (fi_xf.sh check installed them): every variant
            step fi_xf '"${FIXF_S:-420}"' env CONF_S='"${FIXF_S:-420}"' WORKERS=4 VENDOR=.vendor-fi-xf \
                bash tools/device/fi_xf.sh run /tmp/session/cli_fi_xf flashinfer xformers '"$FX"'
        fi
        export PYTHONPATH=tools
        if [ -f /tmp/fx-site/.done ]; then export PYTHONPATH=tools:/tmp/fx-site FLASHINFER_WORKSPACE_BASE=/tmp/fx-jit \
            FLASHINFER_CUDA_ARCH_LIST=9.0a; fi
        step fa3 200 python3 tools/fa3_check_bench.py --skip-check --previous reports/benchmarks/fa3_side_by_side.json \
            --out /tmp/session/fa3
        step fwd 150 python3 tools/cuda_fwd_check_bench.py --skip-check --out /tmp/session/fwd
        step bwd 200 python3 tools/fa3_bwd_check_bench.py --no-check --only fa3,fa2,flash,cudnn,fa4 --head-dims 64,96,128 \
            --out /tmp/session/bwd
        step fp8 150 python3 tools/fa3_fp8_check_bench.py --bench --out /tmp/session/fp8
        for who in fwd:fa3_fwd_kernel fa4:ForwardSm90; do  # where d = 64 loses to FA4: the warps stall reasons
            k=${who%%:*}; f=${who#*:}
            step ncu_$k 150 ncu --set full --clock-control none -k regex:$f --launch-skip 1 --launch-count 1 \
                -f -o /tmp/session/ncu_${k}_d64 python3 tools/fa3_profile_case.py --kernel $k --d 64
            ncu -i /tmp/session/ncu_${k}_d64.ncu-rep --page source --csv --print-source sass \
                > /tmp/session/ncu_${k}_d64.csv 2>/dev/null
            python3 tools/ncu_sass_stalls.py /tmp/session/ncu_${k}_d64.csv --regions > /tmp/session/ncu_${k}_d64.md 2>&1
            ncu -i /tmp/session/ncu_${k}_d64.ncu-rep --page details --csv > /tmp/session/ncu_${k}_d64_details.csv 2>&1
        done
        echo done >> /tmp/session/steps' < /dev/null > /dev/null 2>&1 &
    echo "started the session pipeline in /tmp/session" ;;
session-collect)
    for _ in $(seq 1 "${WAIT_S:-60}"); do grep -q "^${UNTIL:-done}" /tmp/session/steps 2>/dev/null && break; sleep 1; done
    cat /tmp/session/steps 2>/dev/null; tail -c 400 /tmp/session/*.log 2>/dev/null | tail -20
    mkdir -p "$OUT/session"
    cp /tmp/session/steps /tmp/session/*.log /tmp/tox_run/gpu_junit.xml /tmp/tox_run/failures.txt* "$OUT/session/" 2>/dev/null
    cp /tmp/session/ncu_*.md /tmp/session/ncu_*_details.csv "$OUT/session/" 2>/dev/null
    for d in cli_all cli_variants cli_fi_xf fa3 fwd bwd fp8; do
        [ -d /tmp/session/$d ] || continue
        mkdir -p "$OUT/session/$d" && cp /tmp/session/$d/*.json /tmp/session/$d/*.md "$OUT/session/$d/" 2>/dev/null
        gzip -f "$OUT/session/$d/report.json" 2>/dev/null
    done
    gzip -f "$OUT/session/gpu_junit.xml" 2>/dev/null; true ;;
val-collect)
    for _ in $(seq 1 "${WAIT_S:-60}"); do grep -q "^${UNTIL:-done}" /tmp/val/steps 2>/dev/null && break; sleep 1; done
    cat /tmp/val/steps 2>/dev/null; mkdir -p "$OUT/val" && cp -r /tmp/val/. "$OUT/val/" 2>/dev/null
    gzip -f "$OUT"/val/cuda/report.json 2>/dev/null; true ;;
*) echo "unknown stage $stage"; exit 2 ;;
esac
