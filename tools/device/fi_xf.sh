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
#                           (default DIR $OUT; parts already in DIR are replaced): bring them back, carry them in a
#                           later session, skip the compile. Pack after the build has ended (a module being linked
#                           would go in half-written); each module is loaded first (tvm_ffi.load_module, where
#                           tvm-ffi imports) and one that does not load is left out, to compile on the host
#   add-jit DIR             install parts DIR/fi_jit.tar.xz.* (carried, or parked there across calls) as AOT modules
#                           (install does this for parts found in VENDOR)
#   bench [DIR]             the FA3 forward table (tools/fa3_check_bench.py) and the decode row
#                           (tools/cuda_fwd_check_bench.py) with FlashInfer's and xformers' rows, into DIR/bench
#   run REPORT_DIR IMPL...  the gpu profile through the IMPL specs (e.g. xformers xformers@cutlass flashinfer ...);
#                           knobs: WORKERS (default 4), TIMEOUT_S per call (default 1200: a module still missing
#                           compiles inside the first call that needs it), CONF_K (a -k selection), CONF_S (the
#                           run's own limit, default 540 s: the report checkpointed every 25 cases stays)
# Every mode above but wait and pack-jit installs first (into /tmp/fx-site, once per machine) and sets the environment
# the modes share: PYTHONPATH, FLASHINFER_WORKSPACE_BASE (FlashInfer's JIT cache, default /tmp/fx-jit, kept between
# calls on a warm machine; pack-jit reads it), FLASHINFER_CUDA_ARCH_LIST=9.0a, curand's headers for nvcc when the
# toolkit lacks them.
#
# Without the GPU: the same modules built on a CPU machine with nvcc 13 and a package index, so that the GPU session
# carries them instead of compiling (10-20 minutes of device time), with the project's venv active (torch, numpy):
#   offline-prebuild [ARGS] flashinfer_prebuild.py --offline-arch 9.0a ARGS: the modules the H200 would ask for
#                           (recorded with a faked sm_90a device, see its docstring), built one at a time, most used
#                           first, under `nice -n 19` with MAX_JOBS (default 2) jobs; a few minutes per module, so
#                           start it in the background: `nohup bash tools/device/fi_xf.sh offline-prebuild > LOG 2>&1 &`
#                           then `bash tools/device/fi_xf.sh pack-jit .vendor-fi-xf` (the parts go with the vendor
#                           folder; what was built when the time ran out is packed, the rest compiles on the host;
#                           27 modules are one 5.6 MB part, carried in one call with the vendor folder and the tree)
# It installs into /tmp/fx-site-offline: VENDOR's flashinfer tree (the same Python and sources the host gets) and
# apache-tvm-ffi of the vendored wheel's version for this machine's Python, from the index; CUDA_HOME defaults to
# /usr/local/cuda, and a libcuda.so stub (soname libcuda.so.1, what the modules link; the host's driver provides it)
# is made when the toolkit has none. The .so files need only libcudart.so.13, libstdc++, libc and tvm-ffi's symbols.
set -u
export PYTHONUNBUFFERED=1
VENDOR=${VENDOR:-.vendor-fi-xf}
SITE=/tmp/fx-site
JIT=${FLASHINFER_WORKSPACE_BASE:-/tmp/fx-jit}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

unpack_vendor() {  # FlashInfer's tree (Python, sources, headers) and curand's headers into SITE
    python3 - "$VENDOR" "$SITE" <<'PY'
import sys, tarfile
vendor, site = sys.argv[1], sys.argv[2]
with tarfile.open(f"{vendor}/flashinfer.tar.xz") as t:
    t.extractall(site, filter="data")
with tarfile.open(f"{vendor}/curand-include.tar.xz") as t:
    t.extractall(f"{site}/.curand-include", filter="data")
PY
}

install() {
    [ -f "$SITE/.done" ] && return 0
    rm -rf "$SITE" && mkdir -p "$SITE" || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$VENDOR"/wheels/*.whl \
        || return 1
    unpack_vendor || return 1
    if [ -d "$VENDOR/cudart12" ]; then mkdir -p "$SITE/.cudart12" && cp "$VENDOR"/cudart12/* "$SITE/.cudart12/"; fi
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

offline_install() {  # FlashInfer for this machine's Python: the vendored tree, tvm-ffi from the index
    [ -f "$SITE/.done" ] && return 0
    local tvm
    tvm=$(basename "$VENDOR"/wheels/apache_tvm_ffi-*.whl | cut -d- -f2) || return 1
    rm -rf "$SITE" && mkdir -p "$SITE" || return 1
    python3 -m pip install -q --no-compile --target "$SITE" "apache-tvm-ffi==$tvm" requests tabulate tqdm click einops \
        nvidia-ml-py || return 1
    unpack_vendor || return 1
    touch "$SITE/.done"
}

setup() {  # install ($1: install, or offline_install) and set the environment the modes share
    "$1" || { echo "fi_xf.sh: install from $VENDOR failed" >&2; exit 1; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    . "$here/../checkout_env.sh"  # import attention_conformance from this checkout
    export FLASHINFER_WORKSPACE_BASE=$JIT FLASHINFER_CUDA_ARCH_LIST=9.0a
    cuda_inc=${CUDA_HOME:-$(dirname "$(command -v nvcc)")/..}/include
    if [ ! -f "$cuda_inc/curand_kernel.h" ]; then
        export FLASHINFER_EXTRA_CUDAFLAGS="-I$SITE/.curand-include"
    fi
    # xformers' extension needs the CUDA 12 runtime beside a cu130 torch (vendor_fi_xf.sh, cudart12/); the loader
    # reads LD_LIBRARY_PATH when a process starts, so it is set here, before python3
    if [ -d "$SITE/.cudart12" ]; then export LD_LIBRARY_PATH="$SITE/.cudart12${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
}

mode=${1:-check}
shift || true
case "$mode" in
check | prebuild | prebuild-bg | add-jit | run | bench) setup install ;;
offline-prebuild)
    SITE=/tmp/fx-site-offline
    export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    [ -x "$CUDA_HOME/bin/nvcc" ] || { echo "fi_xf.sh: no nvcc in CUDA_HOME=$CUDA_HOME" >&2; exit 1; }
    setup offline_install
    if ! compgen -G "$CUDA_HOME/lib64/stubs/libcuda.so" > /dev/null && ! ldconfig -p | grep -q "libcuda.so "; then
        mkdir -p /tmp/fx-cudastub
        echo 'void fx_libcuda_stub(void) {}' > /tmp/fx-cudastub/stub.c
        cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /tmp/fx-cudastub/libcuda.so /tmp/fx-cudastub/stub.c || exit 1
        export FLASHINFER_EXTRA_LDFLAGS="-L/tmp/fx-cudastub"
    fi
    ;;
esac
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
offline-prebuild)
    MAX_JOBS=${MAX_JOBS:-2} nice -n 19 python3 "$here/flashinfer_prebuild.py" --offline-arch "$FLASHINFER_CUDA_ARCH_LIST" "$@"
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
    rm -f "$dir"/fi_jit.tar.xz.*
    python3 - "$dir" "$JIT" <<'PY'
import pathlib, sys, tarfile
sys.path[:0] = ["/tmp/fx-site-offline", "/tmp/fx-site"]  # tvm-ffi of offline-prebuild's or the host's install
out = pathlib.Path(sys.argv[1]) / "fi_jit.tar.xz"
sos = sorted(pathlib.Path(sys.argv[2], ".cache/flashinfer").glob("*/*/cached_ops/*/*.so"))
try:  # each module loads (its symbols resolve against tvm-ffi and libcudart.so.13); one that does not stays behind
    import tvm_ffi
except ImportError:
    tvm_ffi = None
    print("tvm-ffi does not import here: the modules are packed without a load check")
bad = []
for so in sos if tvm_ffi is not None else ():
    try:
        tvm_ffi.load_module(str(so))
    except Exception as exc:
        bad.append(so)
        print(f"left out, does not load: {so.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
sos = [so for so in sos if so not in bad]
with tarfile.open(out, "w:xz", preset=9) as t:
    for so in sos:
        t.add(so, arcname=f"{so.parent.name}/{so.name}")  # flashinfer/data/aot/<module>/<module>.so
checked = "each loaded here by tvm_ffi.load_module" if tvm_ffi is not None else "not load-checked"
print(f"{len(sos)} module(s), {checked}, {out.stat().st_size / 1e6:.1f} MB")
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
    python3 "$here/../cuda_fwd_check_bench.py" --skip-check --previous reports/benchmarks/cuda_fwd.json \
        --out "$dir/fwd" 2>&1 | tail -15
    ;;
*)
    echo "fi_xf.sh: unknown mode $mode (check, prebuild, prebuild-bg, wait, pack-jit, add-jit, run, bench," \
        "offline-prebuild)" >&2
    exit 2
    ;;
esac
