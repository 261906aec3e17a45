#!/usr/bin/env bash
# A/B of two builds of the kernel library on the H200, for changes too small to read across device calls (a row
# moves by up to 7-9% between calls: the card runs at its 700 W limit). The same benchmark module runs against
# library A and library B in alternation (A B A B ...), each round its own process, so the clocks' drift over the
# call reaches both alike; the benchmark's rows also time torch-flash and cuDNN beside ours, so "ours / cuDNN" of
# a row normalises what drift remains. Both libraries are built on the CPU machine and travel zstd-compressed:
#   LIB_A=.carry_ab/a.so.zst LIB_B=.carry_ab/b.so.zst ROUNDS=2 bash tools/ab_libs_h200.sh \
#       "fa3_check_bench.py --skip-check --variants full" "fa3_fp8_check_bench.py --bench"
# Each argument is one benchmark (a script of tools/ and its arguments; --out is added). AB_LIBS="A B C" (default
# "A B") compares more builds, each from its LIB_<x>. Everything lands in
# $OUT/ab.tgz: <benchmark index><library><round>/ and its console text.
set -u
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4 ATTN_KERNELS_NO_BUILD=1
OUT=${OUT:-/tmp/out}
V=${VENDOR:-.vendor}
mkdir -p "$OUT/ab" build/ab
for x in ${AB_LIBS:-A B}; do
    eval z=\${LIB_$x:?LIB_$x: a zstd-compressed libattn_kernels.so}
    LD_LIBRARY_PATH=$V/bin "$V/bin/zstd" -d -q -f "$z" -o "build/ab/$x.so" || exit 2
done
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/ab/pip.txt" 2>&1 || tail -3 "$OUT/ab/pip.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 500 > "$OUT/ab/smi.csv" 2>/dev/null &
SMI=$!
i=0
for bench in "$@"; do
    i=$((i + 1))
    for r in $(seq 1 "${ROUNDS:-2}"); do
        for x in ${AB_LIBS:-A B}; do
            D=$OUT/ab/$i$x$r
            mkdir -p "$D"
            # shellcheck disable=SC2086
            ATTN_KERNELS_LIB=$PWD/build/ab/$x.so timeout "${AB_S:-150}" \
                python3 tools/$bench --out "$D" > "$D.txt" 2>&1
            echo "$(date -u +%H:%M:%S) bench $i ($bench) library $x round $r rc=$?"
            grep -E "^\| (4(,| \|) |B4 )" "$D.txt" | head -"${AB_LINES:-8}"
        done
    done
done
kill $SMI 2>/dev/null
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
