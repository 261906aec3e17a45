#!/usr/bin/env bash
# The H200 (no package index, ~64 MiB per call, /tmp kept while the machine stays warm) as a hardware runner
# would use it, in stages, one device call each, from the repository root:
# (what the stages carry: `bash tools/device/prepare_local.sh` here first)
#   park1 / park2  park a part of flash-attn-4's CUTLASS DSL (.vendor/, ../shared/tools/vendor_wheels.sh) and the
#                  test wheels (.wheels-test/: `EXTRA_WHEELS=threadpoolctl bash ../shared/tools/test_wheels.sh`, whose
#                  own list lacks threadpoolctl, a requirement of the project: without it tox's install fails) in /tmp
#   install        FA4 and cudnn-frontend (.whl/) into the runner's torch venv, tox into /tmp/toxsite, this
#                  checkout (pip install -e, no index), the kernel library for sm_90a
#   install-vendor FA4 and cudnn-frontend alone, for a timing call through `carried` (below) short of device time
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
#   fi-session     FlashInfer alone (fi_pipeline below: its JIT modules built with every core, its spellings, its rows
#                  in the FA3 forward and decode tables); carry .vendor-fi-xf; session-collect brings it back
#   bwd-table      the FA3 backward table alone (every row, one process, in the background; BWD_S, BWD_DIMS,
#                  BWD_ONLY: the candidates, default fa3,flash,cudnn,fa4; `bwd-table bench`: tox -e bench before it);
#                  session-collect (UNTIL=bwd) copies it
#   gpu-tests      the GPU tests alone (tox -e gpu's pytest command, no tox: through `carried`), in the background;
#                  session-collect (UNTIL=gpu_tests) copies its junit XML
#   bench          the product's benchmark suite alone (tox -e bench's pytest command, no tox: through `carried`),
#                  in the background; session-collect (UNTIL=bench) copies its JSON
#   session        all of it in one background pipeline, in phases (session_pipeline below: the CLI beside the
#                  sanitizers, tox -e gpu alone, the spellings beside xformers and then FlashInfer alone when this
#                  call carries .vendor-fi-xf, the benchmarks alone, an ncu profile; limits CLI_S, TOX_S, VARIANTS_S,
#                  FIXF_S; SKIP_STEPS names steps to leave out);
#                  session-collect (WAIT_S, UNTIL=step) copies what has finished; collect in calls of a few minutes
#                  (WAIT_S=240), not one long one: a machine taken back mid-call loses what that call would have
#                  brought (on the H100 a 570 s collect of tox -e gpu was lost so, with 440 s of the budget)
# Then, here: python tools/compare_front_ends.py gpu_junit.xml cli_all/report.json.gz
set -uo pipefail
stage=${1:?stage}
shift || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/park
export PYTHONUNBUFFERED=1
SELF=$(readlink -f "$0")
site() { python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# unxz SRC.xz DST: a file carried xz-compressed, through Python's lzma module
unxz() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$@"; }

# --- each command once; the stages below compose them -------------------------------------------------------------
# step DIR NAME SECONDS CMD...: CMD under a time limit, its output in DIR/NAME.log, "NAME: exit RC in S s" in DIR/steps;
# a NAME listed in SKIP_STEPS (space-separated: what an earlier session already ran) is recorded as skipped;
# STEP_SIGNAL=INT: the limit interrupts (SIGINT, then a kill 200 s later), so that pytest ends its session and writes
# its junit XML and summary for what ran (tox -e gpu cut at its limit brought nothing back to compare)
step() {
    local dir=$1 name=$2 lim=$3 s rc
    shift 3
    case " ${SKIP_STEPS:-} " in *" $name "*) echo "$name: skipped" >> "$dir/steps"; return 0 ;; esac
    s=$(date +%s)
    if declare -F "$1" > /dev/null; then set -- bash "$SELF" _call "$@"; fi  # a function of this script
    timeout ${STEP_SIGNAL:+-s "$STEP_SIGNAL" -k 200} "$lim" "$@" > "$dir/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc in $(( $(date +%s) - s )) s" >> "$dir/steps"
}
# tox -e gpu as tox.ini says, 8 workers, wheels as files; junit XML and the failures as they happen in /tmp/tox_run
# (not the checkout: every device call re-sends the working tree, which removes files this tree lacks); interrupted
# (SIGINT: STEP_SIGNAL=INT), tox gives pytest 150 s to end its session and write the junit XML of what ran (60 s were
# too few on the H100: pytest-xdist's teardown of 8 workers busy in long tests outlasted them and no XML came back; the
# outcomes and the tests still running are streamed beside it, tools/pytest_stream_failures.py)
tox_gpu() {
    rm -rf /tmp/tox_run && mkdir -p /tmp/tox_run
    env STREAM_FAILURES=/tmp/tox_run/failures.txt PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/park/wheels-test \
        CONFORMANCE_WORKERS=8 PYTHONPATH=/tmp/toxsite python3 -m tox -e gpu -x testenv:gpu.pass_env+=STREAM_FAILURES \
        -x testenv:gpu.interrupt_timeout=150 -x testenv:gpu.terminate_timeout=20 \
        -- --junitxml=/tmp/tox_run/gpu_junit.xml -p no:randomly -p tools.pytest_stream_failures --durations=40 "$@"
}
# the limit of the product's benchmark suite (bench_step), whose JSON comes back whole or not at all: its pytest
# command took 504 s on an H100 on 2026-12-07
BENCH_S=${BENCH_S:-720}
# tox -e bench as tox.ini says (the product's benchmark suite, tests/kernels/test_cuda_bench.py), its JSON into DIR
tox_bench() {
    mkdir -p "$1"
    env PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/park/wheels-test PYTHONPATH=/tmp/toxsite python3 -m tox -e bench \
        -- --benchmark-json="$1/pytest_bench.json"
}
# tox -e bench's pytest command (tox.ini [testenv:bench]) without tox, for a call through `carried` (the library
# built off-device, no tox environment to make, no kernel build): its JSON into DIR
bench_suite() {
    mkdir -p "$1"
    python3 -m pytest -m benchmark_only --benchmark-enable --benchmark-json="$1/pytest_bench.json"
}
# tox -e gpu's pytest command (tox.ini [testenv:gpu], 8 workers) without tox, for a call through `carried` (the
# library built off-device, the machine's own numpy and ml_dtypes): its junit XML and streamed outcomes into
# /tmp/tox_run, as tox_gpu writes them (on an H100, 2026-12-07: 363-478 s, too close to a call's 600 s to run in one)
gpu_suite() {
    rm -rf /tmp/tox_run && mkdir -p /tmp/tox_run
    env STREAM_FAILURES=/tmp/tox_run/failures.txt \
        python3 -m pytest -m gpu --device cuda --profile gpu --impl all -n 8 \
        --junitxml=/tmp/tox_run/gpu_junit.xml -p no:randomly -p tools.pytest_stream_failures --durations=40 "$@"
}
# bench_step DIR NAME RUNNER: the product's benchmark suite (RUNNER: tox_bench or bench_suite) as step NAME of DIR,
# its JSON into DIR/bench, under BENCH_S (every step that runs the suite is this one)
bench_step() {
    step "$1" "$2" "$BENCH_S" "$3" "$1/bench"
}
# the session's bench step (the `bench` stage, and `bwd-table bench` through `carried`): bench_suite into
# /tmp/session/bench, its step named bench for UNTIL=bench session-collect
session_bench() {
    bench_step /tmp/session bench bench_suite
}
# cli_gpu REPORT_DIR WORKERS SPEC...: the gpu profile through SPEC (a call that hangs is a TIMEOUT after 180 s, not a
# worker lost for the rest of the step)
cli_gpu() {
    local dir=$1 workers=$2
    shift 2
    python3 -m attention_conformance run --profile gpu --device cuda --workers "$workers" --timeout 180 \
        --impl "$@" --report-dir "$dir" --progress-every 50
}
sanitize() {  # memcheck | racecheck | synccheck over the kernels' sanitizer case set (SANITIZE_KERNELS: a subset)
    # shellcheck disable=SC2086
    compute-sanitizer --tool "$1" --error-exitcode 1 python3 -m attention_conformance.kernels.cuda.sanitize_cases \
        ${SANITIZE_KERNELS:-}
}
# The GPU-time benchmarks into DIR (alone on the GPU: each one times candidates in alternating rounds), shortest first:
# the tables of the design records (with FlashInfer's and xformers' rows where fi_xf.sh installed them, /tmp/fx-site)
# and tox -e bench (the product's suite), the backward's table last
benches() {
    local dir=$1
    (
        export PYTHONPATH=tools
        if [ -f /tmp/fx-site/.done ]; then
            export PYTHONPATH=tools:/tmp/fx-site FLASHINFER_WORKSPACE_BASE=/tmp/fx-jit FLASHINFER_CUDA_ARCH_LIST=9.0a
            # xformers' extension and the CUDA 12 runtime it links (fi_xf.sh)
            if [ -d /tmp/fx-site/.cudart12 ]; then
                export LD_LIBRARY_PATH="/tmp/fx-site/.cudart12${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            fi
        fi
        # short ones first, so that a session cut short still brings back whole tables (the FA3 forward first: its
        # table has every library's row); each script writes its table after every row, so a step its limit cuts
        # short keeps the rows it finished (12 rows of the FA3 forward: d 64 / 128 / 256 / 96 / 192 / 192 x 128)
        local bv=""  # the lab's builds of one head dim beside attn_fa3_fwd in that head dim's rows, where their tests
        [ -f /tmp/park/lab_dims.ok ] && bv="--bench-variants $(cat /tmp/park/lab_dims.ok)"  # passed (lab_dims)
        # shellcheck disable=SC2086
        step "$dir" fa3 "${FA3_S:-320}" python3 tools/fa3_check_bench.py --skip-check $bv \
            ${FA3_DIMS:+--head-dims $FA3_DIMS} --previous reports/benchmarks/fa3_side_by_side.json --out "$dir/fa3"
        step "$dir" fp8 "${FP8_S:-240}" python3 tools/fa3_fp8_check_bench.py --bench --out "$dir/fp8"
        step "$dir" fwd "${FWD_S:-240}" python3 tools/cuda_fwd_check_bench.py --skip-check \
            --previous reports/benchmarks/cuda_fwd.json --out "$dir/fwd"
        bench_step "$dir" tox_bench tox_bench
        # without our FA2 backward (58 ms a call at d = 256; the table in main has its column): on an H100 the five
        # candidates reached 7 of the 12 rows in 480 s; with the lab library in place (lab_dims), the wide builds'
        # TMA-dQ variant with one dO stage (fa3_dq_tma1, untimed at (192, 128)) beside them
        local only=fa3,flash,cudnn,fa4
        [ -f build/kernels/libattn_kernels_lab.so ] && only="$only,fa3_dq_tma1"
        bwd_table "$dir" 420 "$only" 256,64,128,192x128,96,192
    )
}
# bwd_table DIR LIMIT CANDIDATES DIMS: the FA3 backward table into DIR/bwd, each row against the one in main
# (--previous); BWD_S, BWD_ONLY and BWD_DIMS override the limit, the candidates and the rows
bwd_table() {
    step "$1" bwd "${BWD_S:-$2}" python3 tools/fa3_bwd_check_bench.py --no-check --only "${BWD_ONLY:-$3}" \
        --head-dims "${BWD_DIMS:-$4}" --previous reports/benchmarks/fa3_bwd_side_by_side.json --out "$1/bwd"
}
# ncu_profile DIR KERNEL:D:REGEX[:causal]...: the warps' stall reasons (per SASS line, summed by code region) and the
# details page of one launch of each FA3-shape kernel (tools/fa3_profile_case.py --kernel KERNEL --d D [--causal]),
# into DIR/ncu_KERNEL_dD[_causal].*
ncu_profile() {
    local dir=$1 who k d f c n
    shift
    export PYTHONPATH=tools${PYTHONPATH:+:$PYTHONPATH}  # tools/fa3_profile_case.py imports its neighbours
    for who in "$@"; do
        IFS=: read -r k d f c <<< "$who"
        n="$dir/ncu_${k}_d$d${c:+_$c}"
        step "$dir" "ncu_${k}_d$d${c:+_$c}" 150 ncu --set full --clock-control none -k "regex:$f" --launch-skip 1 \
            --launch-count 1 -f -o "$n" python3 tools/fa3_profile_case.py --kernel "$k" --d "$d" ${c:+--$c}
        ncu -i "$n.ncu-rep" --page source --csv --print-source sass > "$n.csv" 2>/dev/null
        python3 tools/ncu_sass_stalls.py "$n.csv" --regions > "$n.md" 2>&1
        ncu -i "$n.ncu-rep" --page details --csv > "${n}_details.csv" 2>&1
    done
}
# where the d = 256 backward stands: the wide builds' device tests (the lab's too, where build/kernels has the lab
# library), ncu of one launch, causal and not, then its table beside cuDNN, torch-flash, flash-attn-4 and the lab's variants
bwd_wide_look() {
    local dir=$1
    step "$dir" wide_tests 180 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 -k wide \
        tests/kernels/test_cuda_fa3_bwd_device.py
    ncu_profile "$dir" bwd:256:fa3_bwd_wide bwd:256:fa3_bwd_wide:causal
    step "$dir" bwd256 240 python3 tools/fa3_bwd_check_bench.py --no-check --only fa3,fa3_atomic,fa3_dq_f4,flash,cudnn,fa4 \
        --head-dims 256 --out "$dir/bwd"
}
# the d = 192 backward's lab builds VARIANTS (comma-separated lab variant names, kernels/cuda/lab FA3_BWD_VARIANTS) with
# bench keys KEYS (tools/fa3_bwd_check_bench.py's column keys, comma-separated) into DIR: their device tests (every
# d = 192 oracle case, both launchers, dv 192 / 128; the deterministic bit identity), their timing beside the shipped
# build (GPU time, one process, alternating rounds), racecheck and synccheck over the sanitizer cases they build
# (`carried` with build/carry holding the lab library: `... carried bash tools/device/runner_h200.sh _call
# bwd_sliced_look $OUT shared_keys64 fa3_k64`). The timing first: a call cut
# short (a session short of device time) still says whether the tests are worth a call. More than one call's 600 s for
# two variants (the 132 tests of two builds took 270 s on the H100): SKIP_STEPS names what an earlier call ran.
bwd_sliced_look() {
    local dir=$1 variants=$2 keys=$3 v t
    step "$dir" sliced_bench 240 env PYTHONPATH="tools${PYTHONPATH:+:$PYTHONPATH}" python3 tools/fa3_bwd_check_bench.py \
        --no-check --head-dims 192,192x128 --only "fa3,$keys" --rounds 5 --out "$dir/bwd"
    step "$dir" sliced_tests 300 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 12 -rf \
        tests/kernels/test_cuda_fa3_bwd_device.py -k "d192 and (${variants//,/ or })"
    for v in ${variants//,/ }; do
        for t in racecheck synccheck; do
            step "$dir" "${t}_$v" 150 compute-sanitizer --tool "$t" --error-exitcode 1 \
                python3 -m attention_conformance.kernels.cuda.lab.sanitize --fa3-bwd-variant "$v"
        done
    done
}
# every entry-point spelling of the GPU report: torch SDPA's 16 and flash-attn-4's 5
spellings() {
    local b e v=""
    for b in math flash efficient cudnn; do
        for e in is_causal bool_mask causal_upper_left causal_lower_right; do v="$v torch-sdpa-$b@$e"; done
    done
    for e in func varlen_func seqused paged deterministic; do v="$v flash-attn-4@$e"; done
    echo "$v"
}
# compute-sanitizer memcheck, racecheck and synccheck over the kernels' case set into DIR, in the background
sanitizers() {
    step "$1" memcheck 300 sanitize memcheck &
    step "$1" racecheck 300 sanitize racecheck &
    step "$1" synccheck 300 sanitize synccheck &
}
# whether FlashInfer's JIT modules are at hand: carried as AOT parts (fi_xf.sh pack-jit), or built by a prebuild on this
# machine (fi-session); without them every call compiles its module first, and on the H100 beside the spellings'
# 8 workers no case of the gpu profile finished in 420 s (FI_RUN=1 runs it anyway)
fi_modules_ready() {
    [ -n "${FI_RUN:-}" ] || compgen -G "/tmp/fx-site/flashinfer/data/aot/*" > /dev/null \
        || grep -qx "exit 0" /tmp/fx-prebuild.done 2>/dev/null
}
# fixf_runs DIR WORKERS LIB...: FlashInfer and / or xformers through their variants into DIR/cli_LIB (installed from
# the carried vendor folder, parked in /tmp/park/fi-xf by the session stage): one run per library, in turn, so that an
# --impl that cannot run stops its run (exit 2), not the other library's; FlashInfer only where its modules are ready
fixf_runs() {
    local d=$1 workers=$2 lib fx
    shift 2
    [ -f /tmp/fx-site/.done ] || return 0
    for lib in "$@"; do
        if [ "$lib" = flashinfer ] && ! fi_modules_ready; then
            echo "flashinfer: skipped (no JIT modules carried or built: the fi-session stage builds them)" >> "$d/steps"
            continue
        fi
        fx=$(python3 -c "from attention_conformance.adapters.registry import entry_point_names as e
print(' '.join(e('$lib')))")
        # shellcheck disable=SC2086
        step $d "$lib" "${FIXF_S:-420}" env CONF_S="${FIXF_S:-420}" WORKERS="$workers" VENDOR=/tmp/park/fi-xf \
            bash tools/device/fi_xf.sh run $d/cli_$lib $lib $fx
    done
}
fixf_install() {
    [ -d /tmp/park/fi-xf ] && step "$1" fi_xf_install 300 env VENDOR=/tmp/park/fi-xf bash tools/device/fi_xf.sh check
}
# The lab's FA3 forward builds of one head dim (kernels/cuda/lab fa3_fwd_lab.cu: LAB_DIMS names them, default d192,
# the ones not yet timed; d96 the earlier ones), where the session stage found the lab library built off-device
# (build/carry/libattn_kernels_lab.so.xz, parked in /tmp/park): put in place after tox -e gpu, which never sees the lab
# build, then their device tests; once they pass, /tmp/park/lab_dims.ok names those builds (the lab's table,
# kernels/cuda/lab FA3_FWD_VARIANTS), which benches times beside attn_fa3_fwd in their head dim's rows
lab_dims() {
    if [ ! -f /tmp/park/libattn_kernels_lab.so ]; then
        echo "lab_dims: skipped (no lab library: carry build/carry with the session stage)" >> "$1/steps"
        return 0
    fi
    cp /tmp/park/libattn_kernels_lab.so build/kernels/ || return 0
    local dims=${LAB_DIMS:-d192} k=""
    for x in $dims; do k="${k:+$k or }test_fa3_${x}_builds"; done
    step "$1" lab_dims 240 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -k "$k" \
        tests/kernels/test_cuda_fa3_device.py
    # shellcheck disable=SC2086
    grep -q "^lab_dims: exit 0 " "$1/steps" && python3 -c "import sys
from attention_conformance.kernels.cuda import lab
print(','.join(v for v in lab.FA3_FWD_VARIANTS if v.split('_')[0] in sys.argv[1:]))" $dims > /tmp/park/lab_dims.ok
}
# The session, in phases by what may share the GPU: correctness runs together (their verdicts do not depend on the
# GPU being theirs alone), tox -e gpu alone (its wall time is a bar), the benchmarks alone (they time).
#   0  the FA3 backward's device tests (the newest builds, d = 192 / 256 / (192, 128), first run on a GPU): a failure or
#      hang shows at the first session-collect (UNTIL=fa3_bwd), before the runs that claim those builds
#   A  the CLI over every adapter (8 workers) beside compute-sanitizer memcheck, racecheck and synccheck; the
#      CLI's builds fill Inductor's, Triton's and flash-attn-4's caches, so B is a runner's second run (README,
#      hardware runners)
#   B  tox -e gpu
#   C  the spellings (8 workers) beside xformers (4 workers), then FlashInfer alone (8 workers)
#   (the smallest failures' standalone repro files: tools/standalone_repros.py, CPU only, seconds)
#   D  the benchmarks (the backward's d = 256 row first), ncu of the d = 64 forwards
# ONE_PASS=1 (a session with less than 25 minutes of device time): the spellings move into A (the CLI over every
# adapter and every spelling in one run; xformers beside it once installed) and the sanitizers after B, beside
# FlashInfer's run, so that the correctness runs end ~10 minutes sooner; with NO_SPELLINGS=1 the CLI leaves the
# spellings out. FA3_S, FP8_S, FWD_S, BWD_S: the benchmarks' limits (each keeps the rows it finished); BENCH_S
# tox -e bench's.
session_pipeline() {
    local d=/tmp/session
    export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1  # flash-attn-4's disk cache, as a runner keeps it (README)
    step $d fa3_bwd 240 python3 -m pytest -q -p no:randomly -m gpu tests/kernels/test_cuda_fa3_bwd_device.py
    if [ -n "${ONE_PASS:-}" ]; then
        local sp=""  # NO_SPELLINGS=1: the CLI over every adapter alone (the spellings ran in an earlier session)
        [ -n "${NO_SPELLINGS:-}" ] || sp=$(spellings)
        # shellcheck disable=SC2086
        step $d cli "${CLI_S:-540}" cli_gpu $d/cli_all 8 all $sp &
        (fixf_install $d; fixf_runs $d 4 xformers) &
    else
        step $d cli "${CLI_S:-480}" cli_gpu $d/cli_all 8 all &
        fixf_install $d &
        sanitizers $d
    fi
    wait
    STEP_SIGNAL=INT step $d tox "${TOX_S:-600}" tox_gpu
    lab_dims $d &
    if [ -n "${ONE_PASS:-}" ]; then  # the sanitizers after tox -e gpu (phase A's cores are the CLI's and xformers'),
        sanitizers $d                 # beside FlashInfer's run below (verdicts do not depend on the GPU being theirs)
    else
        # shellcheck disable=SC2046
        step $d variants "${VARIANTS_S:-420}" cli_gpu $d/cli_variants 8 $(spellings) &
        fixf_runs $d 4 xformers &
        wait
    fi
    # FlashInfer alone, every core's worker: beside the CLI's 8 it reached 100 of 396 cases in 400 s on an H100,
    # alone all 396 in 139 s
    fixf_runs $d 8 flashinfer
    wait
    # the smallest failures' standalone repro files, written here where FlashInfer and the device are (CPU only)
    # shellcheck disable=SC2046
    step $d repros 120 env PYTHONPATH="/tmp/fx-site${PYTHONPATH:+:$PYTHONPATH}" python3 tools/standalone_repros.py \
        $(for r in cli_all cli_variants cli_flashinfer cli_xformers; do [ -f $d/$r/report.json ] && echo $d/$r; done) \
        --out $d/repros
    benches $d
    # where d = 64 loses to FA4: both forward kernels
    ncu_profile $d fwd:64:fa3_fwd_kernel fa4:64:ForwardSm90
    echo done >> $d/steps
}
# FlashInfer's own session (its JIT modules are not carried: a checkout starts without them): install, every module the
# gpu profile needs built with all cores and nothing else running, its 14 spellings (8 workers), then the FA3 forward
# table and the decode row with its (and xformers') candidates; into /tmp/session like the session, so session-collect
# brings it back
fi_pipeline() {
    local d=/tmp/session
    fixf_install $d
    step $d fi_prebuild "${PREBUILD_S:-900}" env VENDOR=/tmp/park/fi-xf bash tools/device/fi_xf.sh prebuild
    grep -q "^fi_prebuild: exit 0 " $d/steps && echo "exit 0" > /tmp/fx-prebuild.done
    local fx
    fx=$(python3 -c "from attention_conformance.adapters.registry import entry_point_names as e
print(' '.join(e('flashinfer')))")
    # shellcheck disable=SC2086
    step $d flashinfer "${FIXF_S:-480}" env CONF_S="${FIXF_S:-480}" WORKERS=8 VENDOR=/tmp/park/fi-xf \
        bash tools/device/fi_xf.sh run $d/cli_flashinfer flashinfer $fx
    step $d fi_bench "${FIBENCH_S:-360}" env VENDOR=/tmp/park/fi-xf bash tools/device/fi_xf.sh bench $d
    echo done >> $d/steps
}
# snapshot: this checkout as it is now, in /tmp/session_tree (the files of the tree and the library the install stage
# built), where a background pipeline runs: every later device call re-sends the working tree, and a step that imports
# or reads a file while it is replaced failed ("could not get source code": the H100's repros step, during a
# session-collect call); in the snapshot the package imports from it (checkout_env.sh) and tox builds its env there
snapshot() {
    local snap=/tmp/session_tree
    rm -rf $snap && mkdir -p $snap/build || return 1
    tar cf - --exclude=./.vendor --exclude=./.vendor-fi-xf --exclude=./.wheels-test --exclude=./.whl \
        --exclude=./.tox --exclude=./.venv --exclude=./build --exclude=./.git . | tar xf - -C $snap || return 1
    if [ -d build/kernels ]; then cp -a build/kernels $snap/build/; fi
    # the commit the checkout measured (tools/checkout_commit.py; carried: the copy has no git metadata)
    if [ -f build/carry/commit ]; then mkdir -p $snap/build/carry && cp build/carry/commit $snap/build/carry/; fi
    echo $snap
}
# from_snapshot WHAT STAGE [ARGS]: this script's STAGE in the background (setsid), from a snapshot of the checkout
# (a later call's tree replaces the checkout's files under a run that outlasts its call)
from_snapshot() {
    local what=$1 snap
    shift
    snap=$(snapshot) || return 1
    (cd "$snap" && setsid bash tools/device/runner_h200.sh "$@" < /dev/null > /dev/null 2>&1 &)
    echo "started $what in /tmp/session (from the snapshot $snap)"
}
# install_vendor: flash-attn-4 with its CUTLASS DSL (the parked parts, .vendor/install.sh) and cudnn-frontend (.whl/)
# into the runner's torch environment
install_vendor() {
    bash .vendor/install.sh || return 1
    local s
    s=$(site)
    cp -r /tmp/site_vendor/. "$s"/ && echo "$s/nvidia_cutlass_dsl/dsl_packages" > "$s/cutlass_dsl_packages.pth"
    python3 -m pip install -q --no-index --no-deps .whl/nvidia_cudnn_frontend-*.whl
}
# wait_for DIR: until DIR/steps has a line for step UNTIL (default done; the whole name: "fi" is not "fi_xf_install"),
# at most WAIT_S seconds
wait_for() {
    local _
    for _ in $(seq 1 "${WAIT_S:-60}"); do grep -q "^${UNTIL:-done}\b" "$1/steps" 2>/dev/null && break; sleep 1; done
    cat "$1/steps" 2>/dev/null
}

case "$stage" in
carried)
    # one call without the install stage, for a session short of device time: the sm_90a libraries built off-device
    # and carried xz-compressed (build/carry/libattn_kernels.so.xz and, for the lab's variants,
    # libattn_kernels_lab.so.xz: `python -m attention_conformance.kernels.build --arch 90a [--lab] --out DIR`, then
    # `xz -c`), the few wheels the checks need (build/wheels-min), this checkout by links (checkout_env.sh); then the
    # rest of the command line, e.g. `carried bash tools/device/runner_h200.sh _call bwd_wide_look $OUT`
    # every wheel there, without resolving dependencies (the device's numpy serves ml_dtypes)
    python3 -m pip install -q --no-index --no-deps --target /tmp/site build/wheels-min/*.whl 2>&1 | tail -2
    mkdir -p /tmp/carried build/kernels
    unxz build/carry/libattn_kernels.so.xz /tmp/carried/libattn_kernels.so || exit 1
    if [ -f build/carry/libattn_kernels_lab.so.xz ]; then  # where kernels.cuda.lab looks for it
        unxz build/carry/libattn_kernels_lab.so.xz build/kernels/libattn_kernels_lab.so
    fi
    export PYTHONPATH=/tmp/site
    # shellcheck disable=SC1091
    . tools/checkout_env.sh
    export ATTN_KERNELS_LIB=/tmp/carried/libattn_kernels.so ATTN_KERNELS_NO_BUILD=1
    "$@" ;;
park1)
    cp .vendor/parts/p1/* .vendor/bin/* /tmp/park/ && mkdir -p /tmp/park/wheels-test && cp .wheels-test/* /tmp/park/wheels-test/
    compgen -G ".wheels-test/threadpoolctl-*.whl" > /dev/null || echo "park1: .wheels-test has no threadpoolctl wheel"
    ls /tmp/park | head ;;
park2)
    cp .vendor/parts/p2/* /tmp/park/ && ls /tmp/park | wc -l ;;
install-vendor)
    # flash-attn-4 and cudnn-frontend alone (no tox, no pip install -e, no kernel build): with `carried` (the library
    # built here, carried xz-compressed) a timing call needs no more, e.g. after park of p1 + p2 + bin, one call
    # carrying p3, .vendor/wheels, .vendor/bin, .vendor/install.sh, .whl, build/carry/libattn_kernels.so.xz,
    # build/wheels-min and build/carry/commit (the tables' commit: prepare_local.sh): `install-vendor &&
    # BWD_ONLY=fa3,fa4 bash tools/device/runner_h200.sh carried bash tools/device/runner_h200.sh bwd-table` (on an H100 on 2026-12-07: the install 30 s, every row beside
    # torch-flash, cuDNN and flash-attn-4 in 575 s, collected by `UNTIL=bwd WAIT_S=555 ... session-collect`)
    install_vendor ;;
install)
    install_vendor || exit 1
    python3 -m pip install -q --no-index --find-links /tmp/park/wheels-test --target /tmp/toxsite tox
    python3 -m pip install -q --no-deps --no-build-isolation -e .
    python3 -c "import flash_attn.cute, cudnn; print('flash-attn-4 and cudnn-frontend import')"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    # the archs tox -e gpu builds (sm_80, sm_90a), so that its build finds this one up to date (tox.ini: editable)
    python3 -m attention_conformance.kernels.build --out build/kernels 2>&1 | tail -3 ;;
cli)
    name=${CLI_NAME:-all}
    rm -rf "/tmp/cli_$name"; mkdir -p "/tmp/cli_$name"
    # shellcheck disable=SC2086
    setsid bash "$SELF" _cli "$name" ${*:-all} < /dev/null > /dev/null 2>&1 &
    echo "started /tmp/cli_$name" ;;
_cli)
    name=$1; shift
    cli_gpu "/tmp/cli_$name" "${WORKERS:-8}" "$@" > "/tmp/cli_$name/log" 2>&1
    echo $? > "/tmp/cli_$name/rc" ;;
collect)
    name=${1:-all}
    for _ in $(seq 1 "${WAIT_S:-540}"); do [ -f "/tmp/cli_$name/rc" ] && break; sleep 1; done
    tail -3 "/tmp/cli_$name/log"; echo "rc=$(cat /tmp/cli_$name/rc 2>/dev/null || echo running)"
    mkdir -p "$OUT/cli_$name" && cp /tmp/cli_$name/report.* /tmp/cli_$name/log "$OUT/cli_$name/" 2>/dev/null
    gzip -f "$OUT/cli_$name/report.json" 2>/dev/null; true ;;
tox)
    setsid bash "$SELF" _tox "$@" < /dev/null > /dev/null 2>&1 &
    echo "started tox -e gpu in /tmp/tox_run" ;;
_tox)
    start=$(date +%s)
    tox_gpu "$@" > /tmp/tox_gpu.log 2>&1
    echo $? > /tmp/tox_run/rc; mv /tmp/tox_gpu.log /tmp/tox_run/; echo $(( $(date +%s) - start )) > /tmp/tox_run/seconds ;;
tox-collect)
    for _ in $(seq 1 "${WAIT_S:-540}"); do [ -f /tmp/tox_run/rc ] && break; sleep 1; done
    echo "tox -e gpu: exit $(cat /tmp/tox_run/rc 2>/dev/null || echo running) in $(cat /tmp/tox_run/seconds 2>/dev/null || echo '?') s"
    tail -5 /tmp/tox_run/tox_gpu.log; cp /tmp/tox_run/tox_gpu.log /tmp/tox_run/gpu_junit.xml /tmp/tox_run/failures.txt* "$OUT/" 2>/dev/null
    true ;;
validate)
    # the kernels alone, in the background: their device tests (VALIDATE_K: pytest -k, default every kernel's device
    # tests and the timer's GPU tests: 339 on the H100, 118 s) beside the gpu profile through
    # the CUDA adapters, the sanitizers, the benchmarks; val-collect copies what has finished
    rm -rf /tmp/val && mkdir -p /tmp/val
    setsid bash "$SELF" _validate < /dev/null > /dev/null 2>&1 &
    echo "started validate in /tmp/val" ;;
_validate)
    step /tmp/val kernels 300 env PYTHONPATH=tools python3 -m pytest -q -p no:randomly -m gpu tests/kernels \
        -k "${VALIDATE_K:-device or timing}" &
    step /tmp/val cuda 240 cli_gpu /tmp/val/cuda 8 cuda-fa1 cuda-fa2 cuda-splitkv cuda-fa3 cuda-fa3-fp8 cuda-fa3-fp8-vt
    wait
    step /tmp/val memcheck 150 sanitize memcheck
    step /tmp/val racecheck 150 sanitize racecheck
    step /tmp/val synccheck 150 sanitize synccheck
    benches /tmp/val
    echo done >> /tmp/val/steps ;;
session)
    # the whole plan of a session (session_pipeline above) in the background; carry .vendor-fi-xf with this call to
    # include FlashInfer and xformers (parked in /tmp/park/fi-xf: the next call's tree replaces the checkout's copy),
    # and build/carry for the lab's step (lab_dims: build/ is ignored, so without the carry it is skipped silently,
    # as on the H100 on 2026-12-06)
    rm -rf /tmp/session /tmp/tox_run /tmp/park/lab_dims.ok && mkdir -p /tmp/session /tmp/tox_run
    if [ -f build/carry/libattn_kernels_lab.so.xz ]; then
        unxz build/carry/libattn_kernels_lab.so.xz /tmp/park/libattn_kernels_lab.so
    fi
    if [ -d .vendor-fi-xf ]; then rm -rf /tmp/park/fi-xf && cp -r .vendor-fi-xf /tmp/park/fi-xf; fi
    from_snapshot "the session pipeline" _session || exit 1 ;;
_session)
    . tools/checkout_env.sh  # the snapshot's package first on the path (its own tox env installs it too)
    session_pipeline ;;
fi-session)
    # FlashInfer's session (fi_pipeline above) in the background; carry .vendor-fi-xf with this call
    rm -rf /tmp/session && mkdir -p /tmp/session
    rm -rf /tmp/park/fi-xf && cp -r .vendor-fi-xf /tmp/park/fi-xf || exit 1
    from_snapshot "FlashInfer's session" _fi_session || exit 1 ;;
_fi_session)
    . tools/checkout_env.sh
    fi_pipeline ;;
bwd-table)
    # the FA3 backward table alone, every row in one process beside torch flash, cuDNN and flash-attn-4 (after park1,
    # park2 and install), in the background from a snapshot, so that no call's limit cuts it (two foreground calls of
    # 560 s held half the rows each); the stale rows first (d = 192, (192, 128)); session-collect (UNTIL=bwd) brings
    # it back, the table written after every row
    # (`bwd-table bench`: tox -e bench first, under BENCH_S; through `carried`, bench_suite, its step named bench:
    # UNTIL=bench session-collect brings it back while the table runs)
    rm -rf /tmp/session && mkdir -p /tmp/session
    from_snapshot "the backward table" _bwd_table "$@" || exit 1 ;;
_bwd_table)
    . tools/checkout_env.sh
    if [ "${1:-}" = bench ]; then  # tox -e bench first; through `carried` (no tox environment) its pytest command
        if [ -n "${ATTN_KERNELS_NO_BUILD:-}" ]; then session_bench
        else bench_step /tmp/session tox_bench tox_bench; fi
    fi
    export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 PYTHONPATH="tools${PYTHONPATH:+:$PYTHONPATH}"
    bwd_table /tmp/session 1500 fa3,flash,cudnn,fa4 192,192x128,256,128,96,64
    echo done >> /tmp/session/steps ;;
bench)
    # the product's benchmark suite alone (bench_suite), in the background from a snapshot, e.g. after parking p1 + p2
    # + bin: `install-vendor && bash tools/device/runner_h200.sh carried bash tools/device/runner_h200.sh bench`;
    # `UNTIL=bench session-collect` brings back session/bench/pytest_bench.json for ingest_session.py
    rm -rf /tmp/session && mkdir -p /tmp/session
    from_snapshot "the benchmark suite" _bench || exit 1 ;;
_bench)
    . tools/checkout_env.sh
    session_bench
    echo done >> /tmp/session/steps ;;
gpu-tests)
    # the GPU tests alone (gpu_suite: tox -e gpu's pytest command, no tox: through `carried`), in the background from a
    # snapshot, e.g. after parking p1 + p2 + bin: `install-vendor && bash tools/device/runner_h200.sh carried bash
    # tools/device/runner_h200.sh gpu-tests`; `UNTIL=gpu_tests session-collect` brings back its junit XML, which
    # ingest_session.py counts (cut at its limit by SIGINT, so that pytest still writes the XML of what ran)
    rm -rf /tmp/session && mkdir -p /tmp/session
    from_snapshot "the GPU tests" _gpu_tests || exit 1 ;;
_gpu_tests)
    . tools/checkout_env.sh
    STEP_SIGNAL=INT step /tmp/session gpu_tests 900 gpu_suite
    echo done >> /tmp/session/steps ;;
_call)
    "$@" ;;
session-collect)
    # what has finished, as one file ($OUT/session.tar.gz: a call brings back at most 8 files, 2 folders down);
    # python tools/ingest_session.py session.tar.gz unpacks it
    wait_for /tmp/session
    tail -c 400 /tmp/session/*.log 2>/dev/null | tail -20
    c=/tmp/collect/session
    rm -rf /tmp/collect && mkdir -p $c
    cp /tmp/session/steps /tmp/session/*.log /tmp/tox_run/gpu_junit.xml /tmp/tox_run/failures.txt* $c/ 2>/dev/null
    cp /tmp/session/ncu_*.md /tmp/session/ncu_*_details.csv $c/ 2>/dev/null
    for d in cli_all cli_variants cli_flashinfer cli_xformers bench bench/fa3 bench/fwd fa3 fwd bwd fp8; do
        [ -d /tmp/session/$d ] || continue
        mkdir -p $c/$d && cp /tmp/session/$d/*.json /tmp/session/$d/*.md $c/$d/ 2>/dev/null
        gzip -f $c/$d/report.json 2>/dev/null
    done
    if [ -d /tmp/session/repros ]; then mkdir -p $c/repros && cp /tmp/session/repros/* $c/repros/; fi
    gzip -f $c/gpu_junit.xml 2>/dev/null
    tar czf "$OUT/session.tar.gz" -C /tmp/collect session && ls -la "$OUT/session.tar.gz"; true ;;
val-collect)
    wait_for /tmp/val
    gzip -kf /tmp/val/cuda/report.json 2>/dev/null
    tar czf "$OUT/val.tar.gz" -C /tmp --exclude=val/cuda/report.json val && ls -la "$OUT/val.tar.gz"; true ;;
*) echo "unknown stage $stage"; exit 2 ;;
esac
