"""One mixture-of-experts decoder layer on this GPU, measured beside the simulator's price of it (issue 31).

The published MoE rows are predicted too fast (benchmarks/published_runs.py, the MoE table); this measures
where a real MoE layer's time goes on one GPU. For each scenario it builds the runtime's first MoE block
(runtime/model.py `Block`: attention or MLA, router, dropless dispatch, routed and shared experts; the
block `plancast run` trains), times its forward and forward + backward with CUDA events, and profiles
three forward + backward passes with torch.profiler, summing the device time of every kernel by kind:
dense GEMMs, grouped GEMMs, attention, routing and permutation (sort, top-k, softmax, index, scatter),
and the rest (elementwise, reductions). Beside it: the simulator's forward and backward of that layer
(costs/moe.scenario_moe_layer, priced as costs/stage.py does) and its own split by op category.

    python -m benchmarks.gpu_moe_layer benchmarks/gpu_scenarios/qwen3-30b-a3b-4layer-one-h200.toml \
        --json out.json

`--device cpu` runs the same code in fp32 (the test suite does, at small shapes; no GPU needed).
`--host-sync` times the block again with the router's tokens per expert copied to the host in every
forward, as Megatron-Core's dispatchers do before each dispatch (moe/token_dispatcher.py: the all-to-all
dispatcher's sync point `before_ep_alltoall`; DeepEP's normal dispatch hands back its receive counts as
a host list): the host waits for the GPU to reach the router, the GPU's queue drains, and what the
layer pass then costs beyond the plain one is the host's refill of it (docs/moe.md, "side by side").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any

import torch

from benchmarks.gpu_ops import Timer, fwd_bwd
from plancast.runtime.model import Block, ModelConfig
from plancast.runtime.moe import MoE
from plancast.runtime.precision import TORCH_DTYPES
from plancast.simulator.costs.moe import scenario_moe_layer
from plancast.simulator.costs.ops import Shape
from plancast.simulator.costs.stage import _phase_seconds
from plancast.simulator.loader import load_scenario

# Kernel name fragments per kind, matched in this order (lower case); the names are those the CUDA
# libraries give their kernels (cuBLAS nvjet/sm90_xmma, CUTLASS, FlashAttention/cuDNN fmha, CUB sorts).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("grouped_gemm", ("group",)),  # torch._grouped_mm's CUTLASS kernels: GroupProblemShape
    ("attention", ("flash", "fmha", "attention", "cudnn")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "matmul", "addmm", "bmm", "aten::mm")),
    (
        "routing",
        (
            "sort",
            "topk",
            "softmax",
            "index",
            "scatter",
            "gather",
            "cumsum",
            "bincount",
            "histogram",
            "nonzero",
            "unique",
            "argsort",
            "radix",
            "select",
        ),
    ),
)


def kind_of(kernel: str) -> str:
    """The kind a kernel's name says it is (KINDS), else "other" (elementwise, reductions, copies)."""
    name = kernel.lower()
    return next((kind for kind, parts in KINDS if any(p in name for p in parts)), "other")


def profile_kinds(
    fn: Any, device: torch.device, passes: int = 3, top: int = 25
) -> tuple[dict[str, float], list[tuple[str, float, int]]]:
    """Seconds of device time per kernel kind in one call of `fn`, the mean over `passes` profiled calls,
    and the `top` kernels by device time (name, seconds a call of `fn`, launches a call of `fn`)."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if device.type == "cuda" else ProfilerActivity.CPU
    fn()
    with profile(activities=[activity]) as prof:
        for _ in range(passes):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    seconds: dict[str, float] = defaultdict(float)
    kernels = []
    for event in prof.key_averages():
        us = event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total
        if us > 0 and (device.type == "cuda" or event.key.startswith("aten::")):
            seconds[kind_of(event.key)] += us / 1e6 / passes
            kernels.append((event.key[:160], us / 1e6 / passes, event.count // passes))
    return dict(seconds), sorted(kernels, key=lambda k: -k[1])[:top]


def predicted(path: str) -> dict[str, Any]:
    """The simulator's forward and backward seconds of the scenario's MoE layer, and by op category."""
    s = load_scenario(path).scenario
    ops = scenario_moe_layer(Shape.of(s), s, None)
    fwd, bwd_in, bwd_w = _phase_seconds(ops, s)
    by_category: dict[str, float] = defaultdict(float)
    for op in ops:
        f, bi, bw = _phase_seconds((op,), s)
        by_category[op.category] += f + bi + bw
    return {"fwd_s": fwd, "fwd_bwd_s": fwd + bwd_in + bwd_w, "by_category_s": dict(by_category)}


def host_sync_hooks(block: torch.nn.Module, record: list[list[int]] | None = None) -> list[Any]:
    """Forward hooks on the block's MoE routers that copy the tokens each expert gets to the host (top-k
    of the router's logits, counted per expert, `.tolist()`): a device-to-host copy the host waits for.
    `record`: each copy is appended to it."""

    def to_host(logits: torch.Tensor, top_k: int) -> None:
        counts = logits.topk(top_k, dim=-1).indices.flatten().bincount(minlength=logits.shape[-1]).tolist()
        if record is not None:
            record.append(counts)

    return [
        m.router.register_forward_hook(lambda _m, _i, out, k=m.moe.top_k: to_host(out, k))
        for m in block.modules()
        if isinstance(m, MoE)
    ]


def measure(path: str, device: torch.device, repeat: int, host_sync: bool = False) -> dict[str, Any]:
    """The runtime's first MoE block of the scenario: timed forward and forward + backward, and profiled;
    `host_sync`: timed again with the router's counts copied to the host each forward (host_sync_hooks)."""
    s = load_scenario(path).scenario
    cfg = ModelConfig.from_scenario(s)
    if cfg.moe is None:
        print(f"{path}: not a mixture-of-experts model (model.num_local_experts unset)", file=sys.stderr)
        raise SystemExit(2)
    dtype = TORCH_DTYPES[s.training.dtype] if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    block = Block(cfg, layer=cfg.moe.first_dense).to(device, dtype)
    hidden = torch.randn(
        s.training.micro_batch_size, s.training.seq_len, cfg.hidden_size, dtype=dtype, device=device
    )
    fwd, bwd = fwd_bwd(Timer(device, repeat), block, hidden)
    leaf = hidden.detach().requires_grad_(True)
    grad = torch.randn_like(hidden)

    def both() -> None:
        block(leaf).backward(grad)

    kinds, top = profile_kinds(both, device)
    out = {"fwd_s": fwd, "fwd_bwd_s": fwd + bwd, "by_kind_s": kinds, "top_kernels": top}
    if host_sync:
        hooks = host_sync_hooks(block)
        sync_fwd, sync_bwd = fwd_bwd(Timer(device, repeat), block, hidden)
        for hook in hooks:
            hook.remove()
        out["host_sync"] = {"fwd_s": sync_fwd, "fwd_bwd_s": sync_fwd + sync_bwd}
    return out


def report(path: str, meas: dict[str, Any], pred: dict[str, Any]) -> None:
    """One scenario's table: measured and predicted layer times, and where each says the time goes."""
    err = pred["fwd_bwd_s"] / meas["fwd_bwd_s"] - 1
    print(f"== {path}")
    print(
        f"  forward          measured {meas['fwd_s'] * 1e3:8.3f} ms   predicted {pred['fwd_s'] * 1e3:8.3f} ms"
    )
    print(
        f"  forward+backward measured {meas['fwd_bwd_s'] * 1e3:8.3f} ms   predicted "
        f"{pred['fwd_bwd_s'] * 1e3:8.3f} ms  ({err:+.1%})"
    )
    if "host_sync" in meas:
        sync = meas["host_sync"]
        print(
            f"  with the counts to the host each forward: forward {sync['fwd_s'] * 1e3:8.3f} ms, "
            f"forward+backward {sync['fwd_bwd_s'] * 1e3:8.3f} ms "
            f"({(sync['fwd_bwd_s'] - meas['fwd_bwd_s']) * 1e3:+.3f} ms a layer pass)"
        )
    total = sum(meas["by_kind_s"].values()) or 1.0
    print("  measured device time by kernel kind (one forward+backward):")
    for kind, sec in sorted(meas["by_kind_s"].items(), key=lambda kv: -kv[1]):
        print(f"    {kind:14} {sec * 1e3:8.3f} ms  {sec / total:6.1%}")
    print("  top kernels by device time (one forward+backward): ms, launches, kind, name")
    for name, sec, count in meas["top_kernels"]:
        print(f"    {sec * 1e3:8.3f} {count:5d}  {kind_of(name):12} {name[:100]}")
    print("  predicted by op category (forward+backward):")
    for cat, sec in sorted(pred["by_category_s"].items(), key=lambda kv: -kv[1]):
        print(f"    {cat:14} {sec * 1e3:8.3f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="+", help="MoE scenario TOML files (benchmarks/gpu_scenarios/)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", help="write every scenario's figures here")
    ap.add_argument(
        "--host-sync", action="store_true", help="also time it with the router's counts copied to the host"
    )
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    results = []
    for path in args.scenarios:
        meas, pred = measure(path, device, args.repeat, args.host_sync), predicted(path)
        report(path, meas, pred)
        results.append({"scenario": path, "measured": meas, "predicted": pred})
    if args.json:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
