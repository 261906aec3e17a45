#!/usr/bin/env bash
# One H200 device call for the FP8 input kernels (kernels/cuda/hadamard.cu): the GPU bit-compatibility tests
# against oracles/fp8.py, the quantize-time bench (quant_bench.py), the CUDA quantizer's codes on FA3 Table 3's
# inputs for `fp8_accuracy --impl NAME --gpu-quantizer gpu_quant.npz`, a small in-process fp8_accuracy run, and
# compute-sanitizer memcheck over every launch path. The library is built beforehand on the CPU machine
# (python -m attention_conformance.kernels.build --out build/kernels) and travels zstd-compressed as $LIB_ZST.
#   OUT=/tmp/out LIB_ZST=libattn_kernels.so.zst VENDOR=../.vendor bash tools/run_quant_h200.sh
set -u
export PYTHONUNBUFFERED=1 ATTN_KERNELS_NO_BUILD=1 OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4
OUT=${OUT:-/tmp/out}
VENDOR=${VENDOR:-.vendor}
mkdir -p build/kernels "$OUT/bench"
if [ -n "${LIB_ZST:-}" ]; then
    LD_LIBRARY_PATH=$VENDOR/bin "$VENDOR/bin/zstd" -d -q -f "$LIB_ZST" -o build/kernels/libattn_kernels.so
fi
export ATTN_KERNELS_LIB=$PWD/build/kernels/libattn_kernels.so
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$OUT/log.txt" 2>&1 || echo "pip -e failed"
PLUGIN=""
if ! python3 -c "import attention_conformance" 2>/dev/null; then  # fallback: the package-dir mapping by copies
    mkdir -p /tmp/shim && cp -r conformance /tmp/shim/attention_conformance
    for d in oracles kernels property_tests reports; do cp -r $d /tmp/shim/attention_conformance/; done
    export PYTHONPATH=/tmp/shim:${PYTHONPATH:-}; PLUGIN="-p attention_conformance.pytest_plugin"
    echo "using the /tmp/shim copy of the package"
fi
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
timeout 100 python3 -m pytest tests/kernels/test_cuda_quant_device.py tests/kernels/test_cuda_quant_cpu.py -q \
    -p no:cacheprovider -rs $PLUGIN > "$OUT/tests.txt" 2>&1
echo "tests rc=$?"; tail -4 "$OUT/tests.txt"
timeout 60 python3 tools/quant_bench.py --out "$OUT/bench" >> "$OUT/log.txt" 2>&1
echo "bench rc=$?"; cat "$OUT/bench/quant_time.md" 2>/dev/null | tail -9
timeout 60 python3 -m attention_conformance.reporting.fp8_accuracy --dump-gpu-quantizer "$OUT/gpu_quant.npz" 2>&1
echo "dump rc=$?"
timeout 40 python3 -m attention_conformance.reporting.fp8_accuracy --impl reference-fa3-fp8 --seqlen 2048 \
    --out "$OUT/fp8_accuracy_2048.md" 2>&1 | tail -9
cat > /tmp/sanitize_quant.py <<'PY'
import torch
from attention_conformance.kernels import cuda_quant
from attention_conformance.oracles import fp8
for d in (32, 64, 128, 256, 512):
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(2, 4, 77, d, device="cuda").to(dt)
        cuda_quant.hadamard(x, fp8.hadamard_signs(d, 1))
        cuda_quant.hadamard(x.transpose(1, 2).contiguous().transpose(1, 2), fp8.hadamard_signs(d, 1),
                            out_dtype=torch.float32)
        for g in ("per_tensor", "per_head", "per_tile"):
            for f in ("e4m3fn", "e5m2"):
                cuda_quant.quantize_attention_inputs(x, x[:, :2], x[:, :2], format=f, granularity=g, tile_q=32,
                                                     tile_k=5, incoherent=True, seed=2)
torch.cuda.synchronize()
print("sanitize_quant: done")
PY
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 1 python3 /tmp/sanitize_quant.py > "$OUT/memcheck.txt" 2>&1
echo "memcheck rc=$?"; tail -3 "$OUT/memcheck.txt"
