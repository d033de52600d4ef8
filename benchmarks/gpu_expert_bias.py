"""The expert-bias loop Megatron-Core 0.15 / 0.16 runs for gpt-oss, timed beside its price (issue 31).

TEGroupedMLP._apply_bias (megatron/core/transformer/moe/experts.py at core_v0.15.0 / core_v0.16.0) adds
fc2's bias times the routing probability one local expert at a time, `torch.cat([t + b * p for t, b, p
in zip(split(out), biases, split(probs))]).to(dtype)`, each bias a parameter of its own. This runs that
code (the biases as separate leaf tensors, as TE's GroupedLinear holds them) forward and forward +
backward for a few local-expert counts at gpt-oss's hidden size, and prints each beside
costs/expert_bias.py's price (forward; forward + backward at costs/stage.py's memory factor) and the
device's launch gap per tiny op (gpu_ops.launch_gap_us). It also times the loop after an fc2-sized GEMM
against the GEMM alone: what the loop adds there is what a step pays where the host issues it while the
device still runs the GEMM (the simulator adds every call's time, as if none hid). The per-call price
is the simulator's per-op time (ComputeModel.op_overhead_us), a modelling choice: this measures what
the loop takes on one GPU.

    python -m benchmarks.gpu_expert_bias --json out.json        # on a GPU: bf16, the GPU's preset
    python -m benchmarks.gpu_expert_bias --device cpu            # fp32, small rows (the test suite)
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from benchmarks.gpu_ops import Timer, fwd_bwd, launch_gap_us, predicted, preset_of, scenario
from plancast.simulator.costs.expert_bias import expert_bias_ops
from plancast.simulator.costs.ops import DTYPE_BYTES, Op
from plancast.simulator.expert_bias import probs_bytes

HIDDEN = 2880  # gpt-oss (openai/gpt-oss-120b config.json hidden_size)
EXPERTS = (2, 4, 16)  # AutoModel gpt-oss-120b (ep 64), gpt-oss-20b (ep 8), Bridge gpt-oss-120b (ep 8)


def apply_bias(out: torch.Tensor, probs: torch.Tensor, *biases: torch.Tensor) -> torch.Tensor:
    """Megatron-Core 0.15's loop: per local expert `t + b * p`, then cat and cast back."""
    rows = out.shape[0] // len(biases)
    parts = zip(torch.split(out, rows), biases, torch.split(probs, rows), strict=True)
    return torch.cat([t + b * p for t, b, p in parts]).to(out.dtype)


def after_fc2(x: torch.Tensor, w: torch.Tensor, probs: torch.Tensor, *biases: torch.Tensor) -> torch.Tensor:
    """fc2 (one GEMM of the local experts' FLOPs, standing in for TE's per-expert GEMMs) and the loop:
    whether the host's issue of the loop hides behind the GEMM's device time."""
    return apply_bias(x @ w, probs, *biases)


def measure(
    groups: int, rows: int, hidden: int, dtype: torch.dtype, probs_dtype: torch.dtype, timer: Timer
) -> dict[str, tuple[float, float]]:
    """(forward, backward) seconds of the loop over `groups` experts of `rows` tokens each, alone and
    after an fc2 GEMM of gpt-oss's expert width (hidden x hidden), and of that GEMM alone."""
    device = timer.device
    out = torch.randn(groups * rows, hidden, device=device, dtype=dtype)
    probs = torch.rand(groups * rows, 1, device=device, dtype=probs_dtype)
    biases = [torch.randn(hidden, device=device, dtype=dtype) for _ in range(groups)]
    w = torch.randn(hidden, hidden, device=device, dtype=dtype) / hidden**0.5
    return {
        "loop": fwd_bwd(timer, apply_bias, out, probs, *biases),
        "gemm": fwd_bwd(timer, torch.matmul, out, w),
        "gemm_loop": fwd_bwd(timer, after_fc2, out, w, probs, *biases),
    }


def price(
    groups: int, rows: int, hidden: int, cluster: str, gpu: dict[str, Any], dtype: str, fp32: bool
) -> tuple[Op, tuple[float, float]]:
    """costs/expert_bias.py's op for this loop and the simulator's (forward, backward) of it."""
    s = scenario("gpt-oss-120b", 4096, 1, cluster, gpu, dtype)
    d = DTYPE_BYTES[dtype]
    (op,) = expert_bias_ops("per_expert_down", groups * rows, groups, hidden, 0, d, 4 if fp32 else d)
    return op, predicted(op, s)


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    cpu = device.type == "cpu"
    cluster = args.cluster or preset_of(torch.cuda.get_device_name(device) if not cpu else "")
    gpu = (
        {"name": "cpu-core", "peak_tflops": {"fp32": 0.1}, "hbm_GBps": 10.0, "memory_GiB": 16.0}
        if cpu
        else {}
    )
    dtype = "fp32" if cpu else "bf16"
    torch_dtype = torch.float32 if cpu else torch.bfloat16
    probs_dtype = torch.float32 if args.fp32_probs else torch_dtype
    fp32 = args.fp32_probs and probs_bytes("deepep", DTYPE_BYTES[dtype]) > DTYPE_BYTES[dtype]
    timer, rows_out = Timer(device, args.repeat), []
    for groups in args.experts:
        times = measure(groups, args.rows, args.hidden, torch_dtype, probs_dtype, timer)
        op, (pf, pb) = price(groups, args.rows, args.hidden, cluster, gpu, dtype, fp32)
        exposed = [a - b for a, b in zip(times["gemm_loop"], times["gemm"], strict=True)]
        rows_out.append(
            {
                "experts": groups,
                "calls": op.calls,
                "measured_s": list(times["loop"]),
                "exposed_after_gemm_s": exposed,
                "gemm_s": list(times["gemm"]),
                "predicted_s": [pf, pb],
            }
        )
    return {
        "device": torch.cuda.get_device_name(device) if not cpu else "cpu",
        "torch": torch.__version__,
        "cluster": cluster,
        "rows_per_expert": args.rows,
        "hidden": args.hidden,
        "probs": str(probs_dtype),
        "launch_gap_us": launch_gap_us(device, 200 if cpu else 2000),
        "results": rows_out,
    }


def report(result: dict[str, Any]) -> None:
    print(
        f"{result['device']}, {result['rows_per_expert']} rows an expert x {result['hidden']}, probs "
        f"{result['probs']}; launch gap {result['launch_gap_us']:.1f} us an op"
    )
    print("ms, forward / backward: the loop alone, what it adds after an fc2 GEMM, the price")
    print(f"{'experts':>7} {'calls':>5} {'alone':>15} {'after GEMM':>15} {'predicted':>15}")
    for r in result["results"]:
        cells = [r[k] for k in ("measured_s", "exposed_after_gemm_s", "predicted_s")]
        text = " ".join(f"{f * 1e3:7.3f}/{b * 1e3:7.3f}" for f, b in cells)
        print(f"{r['experts']:7d} {r['calls']:5d} {text}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cluster", help="preset whose compute model prices it (default: this GPU's)")
    ap.add_argument("--rows", type=int, help="tokens an expert (default: 1,024 on a GPU, 16 on the CPU)")
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--experts", type=int, nargs="+", default=list(EXPERTS))
    ap.add_argument("--fp32-probs", action="store_true", help="fp32 probabilities, as DeepEP hands them over")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    if args.rows is None:
        args.rows = 16 if args.device == "cpu" else 1024
    if args.rows <= 0 or args.hidden <= 0 or min(args.experts) <= 0 or args.repeat <= 0:
        ap.error("--rows, --hidden, --experts and --repeat must be positive")
    result = run(args)
    report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
