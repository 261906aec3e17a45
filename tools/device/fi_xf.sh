#!/usr/bin/env bash
# FlashInfer and xformers on the GPU host, from the files tools/device/vendor_fi_xf.sh made (carried as VENDOR).
# Run in the project root there:
#     VENDOR=.vendor-fi-xf bash tools/device/fi_xf.sh MODE [ARGS...]
# MODE:
#   check                   install, print the versions and what each adapter says here (no kernels run)
#   prebuild [ARGS]         build every FlashInfer JIT module the run will need, all cores at once
#                           (tools/device/flashinfer_prebuild.py ARGS, default: every variant on the gpu profile)
#   prebuild-bg [ARGS]      the same in the background, in a process session of its own, so that it outlives this
#                           command (the host keeps it and /tmp for calls made within 30 s); log /tmp/fx-prebuild.log
#   wait SECONDS            wait (at most SECONDS) for a background prebuild to end; print its log's tail
#   pack-jit [DIR]          the modules built so far as FlashInfer AOT modules, xz-compressed in parts of 15 MB
#                           (default DIR $OUT): bring them back, carry them in a later session, skip the compile
#   add-jit DIR             install parts DIR/fi_jit.tar.xz.* (carried, or parked there across calls) as AOT modules
#                           (install does this for parts found in VENDOR)
#   bench [DIR]             the FA3 forward table (tools/fa3_check_bench.py) and the decode row
#                           (tools/cuda_fwd_check_bench.py) with FlashInfer's and xformers' rows, into DIR/bench
#   run REPORT_DIR IMPL...  the gpu profile through the IMPL specs (e.g. xformers xformers@cutlass flashinfer ...);
#                           knobs: WORKERS (default 4), TIMEOUT_S per call (default 1200: a module still missing
#                           compiles inside the first call that needs it), CONF_K (a -k selection), CONF_S (the
#                           run's own limit, default 540 s: the report checkpointed every 25 cases stays)
# Every mode installs first (into /tmp/fx-site, once per machine) and sets the environment the modes share:
# PYTHONPATH, FLASHINFER_WORKSPACE_BASE=/tmp/fx-jit (FlashInfer's JIT cache, kept between calls on a warm machine),
# FLASHINFER_CUDA_ARCH_LIST=9.0a, and curand's headers for nvcc when the toolkit lacks them.
set -u
export PYTHONUNBUFFERED=1
VENDOR=${VENDOR:-.vendor-fi-xf}
SITE=/tmp/fx-site
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

install() {
    [ -f "$SITE/.done" ] && return 0
    rm -rf "$SITE" && mkdir -p "$SITE" || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$VENDOR"/wheels/*.whl \
        || return 1
    python3 - "$VENDOR" "$SITE" <<'PY' || return 1
import sys, tarfile
vendor, site = sys.argv[1], sys.argv[2]
with tarfile.open(f"{vendor}/flashinfer.tar.xz") as t:
    t.extractall(site, filter="data")
with tarfile.open(f"{vendor}/curand-include.tar.xz") as t:
    t.extractall(f"{site}/.curand-include", filter="data")
PY
    if compgen -G "$VENDOR/fi_jit.tar.xz.*" > /dev/null; then add_jit "$VENDOR" || return 1; fi
    touch "$SITE/.done"
}

add_jit() {  # FlashInfer modules built before (pack-jit), as AOT modules: flashinfer/data/aot/<module>/<module>.so
    cat "$1"/fi_jit.tar.xz.* | python3 -c "
import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz') as t:
    t.extractall('$SITE/flashinfer/data/aot', filter='data')
" && echo "FlashInfer AOT modules: $(ls "$SITE/flashinfer/data/aot" | wc -l)"
}

install || { echo "fi_xf.sh: install from $VENDOR failed" >&2; exit 1; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
. "$here/../checkout_env.sh"  # import attention_conformance from this checkout
export FLASHINFER_WORKSPACE_BASE=/tmp/fx-jit FLASHINFER_CUDA_ARCH_LIST=9.0a
cuda_inc=$(dirname "$(command -v nvcc)")/../include
if [ ! -f "$cuda_inc/curand_kernel.h" ]; then
    export FLASHINFER_EXTRA_CUDAFLAGS="-I$SITE/.curand-include"
fi

mode=${1:-check}
shift || true
case "$mode" in
check)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    for tool in nvcc c++ ninja; do echo "$tool: $(command -v $tool || echo MISSING)"; done
    echo "curand_kernel.h in the toolkit: $([ -f "$cuda_inc/curand_kernel.h" ] && echo yes || echo "no (carried headers used)")"
    python3 - <<'PY'
import importlib.metadata as md
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
for dist in ("flashinfer-python", "apache-tvm-ffi", "xformers"):
    print(dist, md.version(dist))
import flashinfer, xformers.ops.fmha as fmha
print("flashinfer imports from", flashinfer.__file__)
for name in ("cutlass", "flash", "flash3", "triton_splitk"):
    op = getattr(fmha, name).FwOp
    q = torch.empty(1, 8, 2, 64, dtype=torch.float16, device="cuda")
    print(name, op.NAME, op.not_supported_reasons(fmha.common.Inputs(query=q, key=q, value=q)) or "takes fp16 d=64")
PY
    python3 -m attention_conformance list --device cuda --impl flashinfer xformers | grep -A1 -E "^(flashinfer|xformers)"
    ;;
prebuild)
    python3 "$here/flashinfer_prebuild.py" "$@"
    ;;
prebuild-bg)
    rm -f /tmp/fx-prebuild.done
    setsid nohup bash -c "python3 '$here/flashinfer_prebuild.py' $* > /tmp/fx-prebuild.log 2>&1; \
        echo \"exit \$?\" > /tmp/fx-prebuild.done" > /dev/null 2>&1 < /dev/null &
    echo "prebuild started in the background (log /tmp/fx-prebuild.log)"
    ;;
wait)
    limit=${1:-540}
    for _ in $(seq "$limit"); do [ -f /tmp/fx-prebuild.done ] && break; sleep 1; done
    if [ -f /tmp/fx-prebuild.done ]; then echo "prebuild done: $(cat /tmp/fx-prebuild.done)"; else echo "prebuild still running"; fi
    tail -20 /tmp/fx-prebuild.log
    ;;
pack-jit)
    dir=${1:-${OUT:-/tmp/out}}
    mkdir -p "$dir"
    python3 - "$dir" <<'PY'
import pathlib, sys, tarfile
out = pathlib.Path(sys.argv[1]) / "fi_jit.tar.xz"
sos = sorted(pathlib.Path("/tmp/fx-jit/.cache/flashinfer").glob("*/*/cached_ops/*/*.so"))
with tarfile.open(out, "w:xz", preset=9) as t:
    for so in sos:
        t.add(so, arcname=f"{so.parent.name}/{so.name}")  # flashinfer/data/aot/<module>/<module>.so
print(f"{len(sos)} module(s), {out.stat().st_size / 1e6:.1f} MB")
PY
    (cd "$dir" && split -b 15000000 -d -a 1 fi_jit.tar.xz fi_jit.tar.xz. && rm fi_jit.tar.xz && ls -la fi_jit.tar.xz.*)
    ;;
add-jit)
    add_jit "${1:?DIR}"
    ;;
run)
    dir=$1
    shift
    mkdir -p "$dir"
    # shellcheck disable=SC2068
    timeout "${CONF_S:-540}" python3 -m attention_conformance run --profile gpu --device cuda --impl $@ \
        ${CONF_K:+-k "$CONF_K"} --workers "${WORKERS:-4}" --timeout "${TIMEOUT_S:-1200}" --progress-every 25 \
        --report-dir "$dir" > "$dir/log.txt" 2>&1
    echo "conformance rc=$?"
    grep -v -e Warning -e _warn_once "$dir/log.txt" | tail -30
    ;;
bench)
    # the FA3 forward table and the decode row with FlashInfer's and xformers' candidates (tools/vendor_rows.py)
    dir=${1:-${OUT:-/tmp/out}}/bench
    mkdir -p "$dir"
    export PYTHONPATH="$here/..:$PYTHONPATH"
    python3 "$here/../fa3_check_bench.py" --skip-check --previous reports/benchmarks/fa3_side_by_side.json \
        --out "$dir/fa3" 2>&1 | tail -15
    python3 "$here/../cuda_fwd_check_bench.py" --skip-check --out "$dir/fwd" 2>&1 | tail -15
    ;;
*)
    echo "fi_xf.sh: unknown mode $mode (check, prebuild, prebuild-bg, wait, pack-jit, add-jit, run, bench)" >&2
    exit 2
    ;;
esac
