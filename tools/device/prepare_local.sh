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
#   build/carry/commit  this checkout's commit (tools/checkout_commit.py: git describe), which tests/conftest.py puts in
#                   pytest-benchmark's JSON where the device's copy has no git metadata (carry it with the bench call)
#   build/carry/    with CARRY=1 only: the shipped and the lab library for sm_90a, built here and xz-compressed (the
#                   `carried` stage; PYTHON, default python3, must import this checkout, e.g. its .venv's; ~7 minutes
#                   more): rebuilt whenever the kernel sources change (build/sm90a holds the builds and their stamps)
# Each other folder already there is kept (delete it to make it again). About 5 minutes on a 2-core machine.
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
mkdir -p build/carry && python3 tools/checkout_commit.py > build/carry/commit
if [ -n "${CARRY:-}" ]; then
    # built into build/sm90a, where the build's stamp keeps each library while its sources are unchanged (a folder
    # kept by its existence alone had carried a lab library older than the last kernel commit); compressed again
    # whenever a library is newer than its .xz
    py=${PYTHON:-python3}
    "$py" -m attention_conformance.kernels.build --arch 90a --out build/sm90a --jobs 2
    "$py" -m attention_conformance.kernels.build --arch 90a --lab --out build/sm90a --jobs 2
    mkdir -p build/carry
    for so in libattn_kernels.so libattn_kernels_lab.so; do
        if [ ! build/carry/$so.xz -nt build/sm90a/$so ]; then
            xz -T2 -c build/sm90a/$so > build/carry/$so.xz.part && mv build/carry/$so.xz.part build/carry/$so.xz
        fi
    done
fi
du -sh .vendor .wheels-test .whl .vendor-fi-xf build/wheels-min $([ -d build/carry ] && echo build/carry)
