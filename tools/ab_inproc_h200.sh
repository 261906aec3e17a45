#!/usr/bin/env bash
# One H200 call: device checks of candidate builds of the kernel library, then their A/B in one process
# (ab_libs_inproc.py). The builds are made on the CPU machine and travel zstd-compressed as $CARRY/<name>.so.zst, or
# (smaller, where builds differ in one source) as the object of that source, $CARRY/<name>.o.zst, linked here with the
# objects of the other sources, $CARRY/common.tar.zst (a tar of them, no directories):
#   AB_LIBS="A B C" CHECK_LIBS="B C" CARRY=.carry_ab bash tools/ab_inproc_h200.sh
# CHECK_LIBS: builds run through fa3_check_bench's correctness cases (attn_fa3_fwd against the float64 reference,
# guard bands, poisoned outputs), in parallel, before any timing; a build that fails them, here or in an earlier call
# on the warm machine ($CHECK_DIR, default /tmp/ab_checks), is left out of the A/B. AB_ORDERS=0: the checks alone.
# AB_ORDERS: how many times the A/B runs (the second with the builds in reverse order, so that no build always
# follows cuDNN). VENDOR_INSTALL=1 installs flash-attn-4 from the parts vendor_wheels.sh made (run_fa4.sh's two-call
# protocol), which the A/B then times too. PICK=1: the build ab_libs_inproc's pick chooses (against the first of
# AB_LIBS) is copied to /tmp/ab_winner.so, its name to /tmp/ab_winner, for the next call on the warm machine.
# AB_MAX_ERR: ab_libs_inproc's --max-err (a timing probe whose output is wrong by design needs it raised).
# CUDNN_FE=WHEEL: the nvidia-cudnn-frontend wheel (carried; the host has no package index), unpacked for cuDNN's own
# FP8 forward beside the FP8 builds (ab_libs_inproc's fp8_rows, `cudnn_fp8.py`; it runs on torch's cuDNN).
# AB_LAUNCHER=attn_fa3_fp8_fwd: the FP8 forward instead (ab_libs_inproc's fp8_rows); its checks are then
# fa3_fp8_check_bench --check (every FP8 device case and variant against the NumPy FA3 FP8 reference).
# AB_LAUNCHER=attn_fa3_bwd: the backward alone (ab_libs_inproc's bwd_rows, d = 64 and 128 unless AB_D says); its
# checks are then fa3_bwd_check_bench --no-bench (every backward case, build and launcher against the FP64 oracle,
# determinism).
# An AB_LIBS entry NAME@VARIANT times that build's FA3 forward variant VARIANT (ab_libs_inproc --lib NAME=PATH@VARIANT;
# a key of cuda_lib.FA3_VARIANTS) under the name NAME@VARIANT; where NAME is in CHECK_LIBS, fa3_check_bench runs
# VARIANT's own cases beside the launcher's (not with AB_MAX_ERR), and NAME@VARIANT is left out where NAME failed.
# Results in $OUT/ab_inproc.tgz; the tables are printed last.
set -u
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4 ATTN_KERNELS_NO_BUILD=1
OUT=${OUT:-/tmp/out}
V=${VENDOR:-.vendor}
C=${CARRY:-.carry_ab}
R=$OUT/ab_inproc
mkdir -p "$R" build/ab
unz() { LD_LIBRARY_PATH=$V/bin "$V/bin/zstd" -d -q -f "$@"; }
for x in $(for y in ${AB_LIBS:?AB_LIBS: the names of the builds}; do echo "${y%%@*}"; done | sort -u); do
    if [ -f "$C/$x.so.zst" ]; then
        unz "$C/$x.so.zst" -o "build/ab/$x.so" || exit 2
    else  # a build that travels as one object ($C/$x.o.zst), linked here with the others ($C/common.tar.zst)
        if [ ! -d build/ab/common ]; then
            mkdir -p build/ab/common && unz "$C/common.tar.zst" -o build/ab/common.tar && tar xf build/ab/common.tar \
                -C build/ab/common || exit 2
        fi
        unz "$C/$x.o.zst" -o "build/ab/$x.o" && nvcc -shared -Xcompiler -fPIC build/ab/common/*.o "build/ab/$x.o" \
            -o "build/ab/$x.so" || exit 2
    fi
done
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/pip.txt" 2>&1 || tail -3 "$R/pip.txt"
if [ -n "${VENDOR_INSTALL:-}" ]; then
    bash "$V/install.sh" || echo "flash-attn-4 install failed: it is left out of the A/B"
    export PYTHONPATH=/tmp/site_vendor/nvidia_cutlass_dsl/dsl_packages:/tmp/site_vendor:${PYTHONPATH:-}
    export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4_jit_cache
fi
if [ -n "${CUDNN_FE:-}" ]; then
    rm -rf /tmp/cudnn_fe && python3 -m zipfile -e "$CUDNN_FE" /tmp/cudnn_fe \
        && export PYTHONPATH=/tmp/cudnn_fe:${PYTHONPATH:-} || echo "cudnn-frontend unpack failed"
fi
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 500 > "$R/smi.csv" 2>/dev/null &
SMI=$!
K=${CHECK_DIR:-/tmp/ab_checks}  # check results outlive the call: a later call on the warm machine reads them
mkdir -p "$K"
pids=""
for x in ${CHECK_LIBS:-}; do
    if [ "${AB_LAUNCHER:-}" = attn_fa3_fp8_fwd ]; then
        set -- tools/fa3_fp8_check_bench.py --check
    elif [ "${AB_LAUNCHER:-}" = attn_fa3_bwd ]; then
        set -- tools/fa3_bwd_check_bench.py --no-bench
    else
        # the default launcher's cases, and each variant x is timed as (x@VARIANT in AB_LIBS) through its own cases;
        # not with AB_MAX_ERR, whose timing probes are wrong by design
        vs=full
        [ -z "${AB_MAX_ERR:-}" ] && for y in $AB_LIBS; do [ "${y%%@*}" = "$x" ] && [ "$y" != "$x" ] && vs="$vs,${y#*@}"; done
        set -- tools/fa3_check_bench.py --skip-bench --variants "$vs"
    fi
    (ATTN_KERNELS_LIB=$PWD/build/ab/$x.so timeout "${CHECK_S:-240}" python3 "$@" --out "$K/check_$x" \
        > "$K/check_$x.txt" 2>&1; echo $? > "$K/check_$x.rc") &
    pids="$pids $!"
done
[ -n "$pids" ] && wait $pids  # (a bare wait would also wait for nvidia-smi, which never ends)
ok=""
for x in $AB_LIBS; do
    b=${x%%@*}
    if [ -f "$K/check_$b.rc" ]; then
        echo "check $x: rc=$(cat "$K/check_$b.rc") $(grep "^correctness:" "$K/check_$b.txt")" \
            "$(grep -c "^OK" "$K/check_$b.txt") OK"
        grep -E "^(BAD|FAIL)" "$K/check_$b.txt" | head -5
        [ "$(cat "$K/check_$b.rc")" = 0 ] && ok="$ok $x"
    else
        ok="$ok $x"
    fi
done
cp -r "$K" "$R/checks"
echo "timed: $ok"
order=$ok
for i in $(seq 1 "${AB_ORDERS:-2}"); do
    # shellcheck disable=SC2086
    set -- $(for x in $order; do b=${x%%@*}; echo "--lib $x=$PWD/build/ab/$b.so${x#"$b"}"; done)
    timeout "${AB_S:-300}" python3 tools/ab_libs_inproc.py "$@" \
        --rounds "${ROUNDS:-7}" ${AB_D:+--d $AB_D} ${AB_MAX_ERR:+--max-err $AB_MAX_ERR} ${AB_LAUNCHER:+--launcher $AB_LAUNCHER} --out "$R/order$i" \
        > "$R/order$i.txt" 2>&1
    echo "A/B order $i ($order) rc=$?"; sed -n '/^| N /,$p' "$R/order$i.txt"
    order=$(for x in $order; do echo "$x"; done | tac | tr '\n' ' ')
done
if [ -n "${PICK:-}" ]; then  # the build ab_libs_inproc.pick chooses against the first of AB_LIBS -> /tmp/ab_winner.so
    first=${AB_LIBS%% *}
    w=$(python3 tools/ab_libs_inproc.py --lib "$first=-" \
        --pick "$R"/order*/ab.json 2> "$R/pick.txt")
    echo "picked: ${w:-none} (geometric means against $first: $(cat "$R/pick.txt"))"
    [ -n "$w" ] && cp "build/ab/${w%%@*}.so" /tmp/ab_winner.so && echo "$w" > /tmp/ab_winner
fi
kill $SMI 2>/dev/null
tar czf "$OUT/ab_inproc.tgz" -C "$OUT" ab_inproc && rm -rf "$R"
