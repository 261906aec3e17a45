#!/usr/bin/env bash
# Everything runner_h200.sh's stages carry, made on this (CPU) machine in one go, from the repository root:
#     bash tools/device/prepare_local.sh
# A new checkout has none of these folders (they are git-ignored through .git/info/exclude, which this writes: an
# untracked folder that git does not ignore would travel with every device call):
#   .vendor/        flash-attn-4 and its CUTLASS DSL in parts (../shared/tools/vendor_wheels.sh): park1, park2, install
#   .wheels-test/   tox, pytest, hypothesis, ... and threadpoolctl, which the shared script's list lacks
#                   (../shared/tools/test_wheels.sh with EXTRA_WHEELS): park1
#   .whl/           cudnn-frontend for the host's Python (cp312): install
#   .vendor-fi-xf/  FlashInfer, xformers, curand headers, libcudart.so.12 (vendor_fi_xf.sh): session
#   build/wheels-min/  pytest, its plugins and hypothesis, taken from .wheels-test: the `carried` stage (build/ is ignored)
#   build/carry/    with CARRY=1 only: the shipped and the lab library for sm_90a, built here and xz-compressed (the
#                   `carried` stage; PYTHON, default python3, must import this checkout, e.g. its .venv's; ~7 minutes more)
# Each folder already there is kept (delete it to make it again). About 5 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tools/device
for d in .vendor/ .wheels-test/ .whl/ .vendor-fi-xf/; do
    grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude
done
[ -d .vendor ] || bash ../shared/tools/vendor_wheels.sh
[ -d .wheels-test ] || EXTRA_WHEELS=threadpoolctl bash ../shared/tools/test_wheels.sh
if [ ! -d .whl ]; then
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        -d .whl "nvidia-cudnn-frontend>=1.14"
fi
[ -d .vendor-fi-xf ] || bash "$here/vendor_fi_xf.sh"
if [ ! -d build/wheels-min ]; then
    mkdir -p build/wheels-min
    for w in execnet hypothesis iniconfig packaging pluggy pygments pytest-[0-9] pytest_benchmark pytest_timeout \
        pytest_xdist py_cpuinfo sortedcontainers threadpoolctl typing_extensions; do
        cp .wheels-test/$w*.whl build/wheels-min/  # unquoted: $w may be a glob (pytest-[0-9])
    done
fi
if [ -n "${CARRY:-}" ] && [ ! -d build/carry ]; then
    py=${PYTHON:-python3}
    tmp=$(mktemp -d)
    "$py" -m attention_conformance.kernels.build --arch 90a --out "$tmp/main" --jobs 2
    "$py" -m attention_conformance.kernels.build --arch 90a --lab --out "$tmp/lab" --jobs 2
    mkdir -p build/carry.part
    xz -T2 -c "$tmp/main/libattn_kernels.so" > build/carry.part/libattn_kernels.so.xz
    xz -T2 -c "$tmp/lab/libattn_kernels_lab.so" > build/carry.part/libattn_kernels_lab.so.xz
    mv build/carry.part build/carry  # whole or not at all: a cut run leaves no half folder to be kept
    rm -rf "$tmp"
fi
du -sh .vendor .wheels-test .whl .vendor-fi-xf build/wheels-min $([ -d build/carry ] && echo build/carry)
