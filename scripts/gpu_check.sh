#!/usr/bin/env bash
# The checks that need a GPU, in one go (CI has none): the GPU tests (CUDA-event timing, NCCL, NVML
# telemetry, a measured run through `plancast run`'s launcher) and the per-op compute check
# (benchmarks/gpu_ops.py) at the shapes of two published H100 rows: torchtitan's Llama 3 8B (seq 8192,
# local batch 2) and llm-foundry's MPT-7B (gpt3-6.7b's shape, seq 2048, micro-batch 6).
# Logs and JSON go to $OUT (default ./out). Run from the repository root with a CUDA torch.
set -u
out=${OUT:-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,power.limit,power.max_limit,clocks.max.sm,memory.total,driver_version \
    --format=csv | tee "$out/gpu.csv"
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
"$py" -m pytest -q -m gpu tests/runtime/test_gpu.py -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
"$py" -m benchmarks.gpu_ops --json "$out/gpu_ops_llama3_8b.json" 2>&1 | tee "$out/gpu_ops_llama3_8b.log"
"$py" -m benchmarks.gpu_ops --model gpt3-6.7b --seq 2048 --micro-batch 6 \
    --json "$out/gpu_ops_mpt7b.json" 2>&1 | tee "$out/gpu_ops_mpt7b.log"
