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
#                           are there) and xformers (PyPI's is built against torch 2.10 + CUDA 12.8: beside torch
#                           2.11 + cu130 its C++ extension does not load, and then none of its operators runs, not
#                           even cutlassF-pt / fa2F-pt over PyTorch's kernels, nor Triton's split-KV: XF must name a
#                           build for the host's torch, e.g. from PyTorch's cu130 index with XF_INDEX below)
#   curand-include.tar.xz   curand headers (nvidia-curand, CUDA 13): FlashInfer's sm90 modules include
#                           curand_kernel.h through CUTLASS's utilities; a toolkit without curand cannot build them
# Versions: FI, TVM_FFI, XF, CURAND below (override from the environment); XF_INDEX: the index XF comes from (default
# the configured one), e.g. https://download.pytorch.org/whl/cu130 for a build against torch 2.11 + CUDA 13.
set -euo pipefail
DEST=${1:-.vendor-fi-xf}
FI=${FI:-flashinfer-python==0.7.2.post1}
TVM_FFI=${TVM_FFI:-apache-tvm-ffi==0.1.15.post2}
XF=${XF:-xformers==0.0.35}
CURAND=${CURAND:-nvidia-curand==10.4.5.25}
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
for p in "$FI" "$CURAND"; do python3 -m pip download -q --no-deps $plat -d "$tmp" "$p"; done
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
for w in "$DEST"/wheels/*.whl; do
    unzip -p "$w" '*.dist-info/METADATA' | grep -E '^(Name|Version|Requires-Dist): ' | grep -v 'extra ==' || true
done
du -sh "$DEST" "$DEST"/* "$DEST"/wheels/*
