#!/usr/bin/env bash
# Prepare FlashInfer and xformers for the GPU host, which has no package index and takes at most 64 MiB per
# command (the project's tree, ~25 MB, included). Run from the project root on a machine that reaches the index:
#     bash tools/device/vendor_fi_xf.sh [DEST]        (DEST default .vendor-fi-xf; ignore it in .git/info/exclude)
# DEST gets, ~25 MB in all, so one device call carries everything:
#   flashinfer.tar.xz       flashinfer-python, its wheel unpacked and recompressed: the 62 MB wheel is 427 MB of
#                           Python, sources and headers for its JIT; xz brings that to ~16 MB, and Python's tarfile
#                           unpacks it on the host (no xz binary needed there)
#   wheels/                 apache-tvm-ffi (cp312; FlashInfer's only requirement the host lacks at import: numpy,
#                           einops, ninja, packaging, requests, tabulate, tqdm, click, nvidia-ml-py, cuda-bindings
#                           are there) and xformers (PyPI's is built with torch 2.10 + CUDA 12.8; where its C++
#                           extension does not load, none of its operators runs, not even cutlassF-pt / fa2F-pt over
#                           PyTorch's kernels, nor Triton's split-KV: beside torch 2.11 + cu130 it lacked
#                           libcudart.so.12, which cudart12/ below brings; or XF names a build for the host's torch,
#                           e.g. from PyTorch's cu130 index with XF_INDEX below)
#   curand-include.tar.xz   curand headers (nvidia-curand, CUDA 13): FlashInfer's sm90 modules include
#                           curand_kernel.h through CUTLASS's utilities; a toolkit without curand cannot build them
#   cudart12/               libcudart.so.12 alone, from nvidia-cuda-runtime-cu12 (CUDART12): PyPI's xformers 0.0.35
#                           links its one extension, xformers/_C.so, against the CUDA 12 runtime and otherwise only
#                           against torch's stable C ABI (aoti_torch_*, torch_*: nm -D), so beside torch 2.11 + cu130,
#                           which ships libcudart.so.13, what it lacks to load is that file (fi_xf.sh puts it on
#                           LD_LIBRARY_PATH; the wheel itself is not installed: its nvidia/__init__.py would shadow
#                           the host's nvidia namespace packages, cuDNN's among them)
# Versions: FI, TVM_FFI, XF, CURAND below (override from the environment); XF_INDEX: the index XF comes from (default
# the configured one), e.g. https://download.pytorch.org/whl/cu130 for a build against torch 2.11 + CUDA 13.
set -euo pipefail
DEST=${1:-.vendor-fi-xf}
FI=${FI:-flashinfer-python==0.7.2.post1}
TVM_FFI=${TVM_FFI:-apache-tvm-ffi==0.1.15.post2}
XF=${XF:-xformers==0.0.35}
CURAND=${CURAND:-nvidia-curand==10.4.5.25}
CUDART12=${CUDART12:-nvidia-cuda-runtime-cu12==12.8.90}
plat="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform any"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$DEST" && mkdir -p "$DEST/wheels"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps $plat -d "$DEST/wheels" "$TVM_FFI"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps $plat -d "$DEST/wheels" ${XF_INDEX:+--index-url "$XF_INDEX"} "$XF"
# shellcheck disable=SC2086
for p in "$FI" "$CURAND" "$CUDART12"; do python3 -m pip download -q --no-deps $plat -d "$tmp" "$p"; done
python3 -m zipfile -e "$tmp"/flashinfer_python-*.whl "$tmp/fi"
tar cf - -C "$tmp/fi" . | xz -T0 -9 > "$DEST/flashinfer.tar.xz"
python3 - "$tmp" <<'PY'
import sys, zipfile, pathlib
tmp = pathlib.Path(sys.argv[1])
wheel = next(tmp.glob("nvidia_curand-*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if "/include/" in name and name.endswith(".h"):
            z.extract(name, tmp / "curand")
PY
tar cf - -C "$(dirname "$(find "$tmp/curand" -name curand_kernel.h)")" . | xz -T0 -9 > "$DEST/curand-include.tar.xz"
mkdir -p "$DEST/cudart12"
python3 - "$tmp" "$DEST/cudart12" <<'PY'
import sys, zipfile, pathlib
tmp, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
with zipfile.ZipFile(next(tmp.glob("nvidia_cuda_runtime_cu12-*.whl"))) as z:
    (dest / "libcudart.so.12").write_bytes(z.read("nvidia/cuda_runtime/lib/libcudart.so.12"))
PY
for w in "$DEST"/wheels/*.whl; do
    unzip -p "$w" '*.dist-info/METADATA' | grep -E '^(Name|Version|Requires-Dist): ' | grep -v 'extra ==' || true
done
du -sh "$DEST" "$DEST"/* "$DEST"/wheels/*
