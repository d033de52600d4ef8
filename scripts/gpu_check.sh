#!/usr/bin/env bash
# The checks that need a GPU, in one go (CI has none). Parts, all by default:
#   tests  the GPU tests (CUDA-event timing, NCCL, NVML telemetry, a measured run through the launcher)
#   ops    the per-op compute check (benchmarks/gpu_ops.py) at the shapes of two published H100 rows:
#          torchtitan's Llama 3 8B (seq 8192, local batch 2) and llm-foundry's MPT-7B (gpt3-6.7b's
#          shape, seq 2048, micro-batch 6)
#   kernels  bf16 and FP8 GEMMs per scaling, FP8 casts and causal attention per backend beside the
#          simulator's rates (benchmarks/gpu_kernels.py), 2 files
#   memory the memory shapes (MEMORY_SCENARIOS, default benchmarks/gpu_scenarios/*-one-h200.toml): each run,
#          compared, its compare JSON one line of memory.jsonl, its run folder appended to memory_runs.tar
#          as soon as it ends (so a run cut off by a time limit keeps the ones before it), 3 files
#   loop   the whole loop on this GPU: simulate, run and compare examples/gpt3-1.3b-one-h100.toml, or
#          LOOP_SCENARIOS (e.g. "examples/gpt3-1.3b-one-h100.toml benchmarks/gpu_scenarios/*.toml", the
#          four runs kept in tests/data/gpu_runs/)
# Usage: scripts/gpu_check.sh [tests] [ops] [kernels] [memory] [loop] (default tests ops loop). Logs and JSON go to $OUT (default ./out), at most
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
if want kernels; then
    "$py" -m benchmarks.gpu_kernels --json "$out/gpu_kernels.json" 2>&1 | tee "$out/gpu_kernels.log"
fi
if want memory; then  # one log, one JSON line per run, one tar of the run folders
    for example in ${MEMORY_SCENARIOS:-benchmarks/gpu_scenarios/*-one-h200.toml}; do
        name=$(basename "$example" .toml)
        {
            echo "== $name"
            "$py" -m plancast run "$example" --out "$out/run-$name" 2>&1 | tail -4
            "$py" -m plancast compare "$out/run-$name" 2>&1 | grep -E "step time|events|peak_memory|status"
        } | tee -a "$out/memory.log"
        "$py" -m plancast compare "$out/run-$name" --json | tr -d '\n' >> "$out/memory.jsonl" && echo >> "$out/memory.jsonl"
        tar -C "$out" -rf "$out/memory_runs.tar" "run-$name" && rm -rf "$out/run-$name"
    done
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
