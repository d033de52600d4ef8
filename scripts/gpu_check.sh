#!/usr/bin/env bash
# The checks that need a GPU, in one go (CI has none). Parts, all by default:
#   tests  the GPU tests (CUDA-event timing, NCCL, NVML telemetry, a measured run through the launcher)
#   ops    the per-op compute check (benchmarks/gpu_ops.py) at the shapes of two published H100 rows:
#          torchtitan's Llama 3 8B (seq 8192, local batch 2) and llm-foundry's MPT-7B (gpt3-6.7b's
#          shape, seq 2048, micro-batch 6)
#   loop   the whole loop on this GPU: simulate, run and compare examples/gpt3-1.3b-one-h100.toml, or
#          LOOP_SCENARIOS (e.g. "examples/gpt3-1.3b-one-h100.toml benchmarks/gpu_scenarios/*.toml", the
#          four runs kept in tests/data/gpu_runs/)
# Usage: scripts/gpu_check.sh [tests] [ops] [loop]. Logs and JSON go to $OUT (default ./out), at most
# eight files. Run from the repository root with a CUDA torch.
set -u
out=${OUT:-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
py=${PYTHON:-python3}
parts=${*:-tests ops loop}
want() { [[ " $parts " == *" $1 "* ]]; }

if want tests; then
    {
        nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv
        "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
        "$py" -m pytest -q -m gpu tests/runtime/test_gpu.py -p no:cacheprovider 2>&1
    } | tee "$out/gpu_tests.log"
fi
if want ops; then
    "$py" -m benchmarks.gpu_ops --json "$out/gpu_ops_llama3_8b.json" 2>&1 | tee "$out/gpu_ops_llama3_8b.log"
    "$py" -m benchmarks.gpu_ops --model gpt3-6.7b --seq 2048 --micro-batch 6 \
        --json "$out/gpu_ops_mpt7b.json" 2>&1 | tee "$out/gpu_ops_mpt7b.log"
fi
if want loop; then  # LOOP_SCENARIOS: the scenarios to run (default the one-GPU example), 3 files each
    for example in ${LOOP_SCENARIOS:-examples/gpt3-1.3b-one-h100.toml}; do
        name=$(basename "$example" .toml)
        {
            "$py" -m plancast simulate "$example" 2>&1
            "$py" -m plancast run "$example" --out "$out/run-$name" 2>&1 | tail -8
            "$py" -m plancast compare "$out/run-$name" 2>&1
        } | tee "$out/$name.log"
        "$py" -m plancast compare "$out/run-$name" --json > "$out/$name.compare.json" 2>&1
        tar -C "$out" -czf "$out/$name.run.tgz" "run-$name" && rm -rf "$out/run-$name"
    done
fi
