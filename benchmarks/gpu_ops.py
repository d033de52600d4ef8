"""The compute model checked on real hardware: every operator of one transformer block, measured on this
machine's GPU at a scenario's shapes, beside the time the simulator predicts for it.

The simulator prices an op as a roofline with a shape-dependent GEMM efficiency (simulator/costs/
efficiency.py). Its Hopper constants were set by ratio to the A100 fit; this measures them. Per op it
prints measured and predicted forward and backward times, and what the measurement implies:

- GEMMs: achieved fraction of peak per shape, and e(F) = e_max F / (F + F_half) fitted over a size sweep
  (square GEMMs 512..16384 plus the model's);
- attention: SDPA, causal, forward and backward, per available backend (flash = FlashAttention-2,
  cudnn, efficient), as a fraction of peak counted as the simulator counts it (the full s x s scores);
- memory-bound ops (norm, rope, SwiGLU, residual add, cross-entropy): achieved HBM bandwidth;
- one whole block (runtime/model.py's, the one `plancast run` trains), forward and forward + backward,
  against the simulator's forward and backward of one layer.

Run: `python -m benchmarks.gpu_ops [--model llama3-8b --seq 8192 --micro-batch 2] [--json out.json]`.
`--kernels` runs benchmarks/gpu_kernels.py instead: bf16 and FP8 GEMMs per scaling and causal attention per
backend at a fixed set of shapes, beside the simulator's rates (issue 32's table).
`--device cpu` runs the same code in fp32 at small shapes (the test suite does; no GPU needed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (the torch convention)

from benchmarks.gpu_ops_report import report
from plancast.runtime.model import Block, ModelConfig, rotary
from plancast.runtime.precision import TORCH_DTYPES
from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.op import pass_multiple
from plancast.simulator.costs.ops import Op, Shape, head_forward, layer_forward
from plancast.simulator.costs.stage import _phase_seconds
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario

SWEEP = (512, 1024, 2048, 4096, 8192, 16384)


def scenario(
    model: str, seq: int, micro_batch: int, cluster: str, gpu: dict[str, Any], dtype: str
) -> Scenario:
    """One node, data parallel only: every op runs at the shapes of one rank without model parallelism."""
    data = {
        "model": {"preset": model},
        "training": {
            "seq_len": seq,
            "micro_batch_size": micro_batch,
            "global_batch_size": micro_batch * 8,  # dp 8 on one node: the per-op costs do not depend on it
            "dtype": dtype,
            "flash_attention": True,
        },
        "parallelism": {},
        "cluster": {"preset": cluster, "num_nodes": 1, **({"gpu": gpu} if gpu else {})},
    }
    return parse_scenario(data, "gpu_ops").scenario


class Timer:
    """Median seconds of a callable: CUDA events on a GPU, wall time on the CPU. A call shorter than
    MIN_SAMPLE_S runs several times per sample, so that launch latency does not count as work."""

    MIN_SAMPLE_S = 1e-3

    def __init__(self, device: torch.device, repeat: int) -> None:
        self.device, self.repeat = device, repeat

    def _sample(self, fn: Callable[[], Any], calls: int) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls

    def __call__(self, fn: Callable[[], Any]) -> float:
        fn()
        calls = max(1, min(100, int(self.MIN_SAMPLE_S / max(self._sample(fn, 1), 1e-7))))
        return statistics.median(self._sample(fn, calls) for _ in range(self.repeat))


def fwd_bwd(timer: Timer, fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> tuple[float, float]:
    """(forward, backward) seconds of fn(*inputs); backward = time(forward + backward) - forward."""
    leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
    with torch.no_grad():
        fwd = timer(lambda: fn(*leaves))
    out = fn(*leaves)
    grad = torch.randn_like(out)

    def both() -> None:
        for x in leaves:
            x.grad = None
        fn(*leaves).backward(grad)

    return fwd, max(timer(both) - fwd, 0.0)


def gemm_dims(x: Shape) -> dict[str, tuple[int, int, int]]:
    """(m, k, n) of each GEMM op of `layer_forward` and `head_forward` at tp 1."""
    tokens = x.b * x.s
    up = 2 * x.ffn if x.swiglu else x.ffn
    return {
        "qkv": (tokens, x.h, x.h + 2 * x.kv_dim),
        "out_proj": (tokens, x.h, x.h),
        "gate_up" if x.swiglu else "fc1": (tokens, x.h, up),
        "fc2": (tokens, x.ffn, x.h),
        "logits": (tokens, x.h, x.vocab),
    }


def gemm_times(
    timer: Timer, m: int, k: int, n: int, dtype: torch.dtype, device: torch.device
) -> tuple[float, float]:
    """Forward Y = X W^T and backward dX = dY W, dW = dY^T X of a linear layer, as nn.Linear runs them."""
    x, w, dy = (torch.randn(*shape, dtype=dtype, device=device) for shape in ((m, k), (n, k), (m, n)))
    fwd = timer(lambda: x @ w.t())
    bwd = timer(lambda: (dy @ w, dy.t() @ x))
    return fwd, bwd


def fit_saturation(flops: np.ndarray, eff: np.ndarray) -> tuple[float, float]:
    """e_max, F_half (GFLOP) of e(F) = e_max F / (F + F_half), least squares on relative error, F_half on a
    log grid (0.001..100 GFLOP) with e_max closed-form for each."""
    best = (np.inf, 0.0, 0.0)
    for half in np.logspace(6, 11, 501):
        shape = flops / (flops + half)
        e_max = float(np.sum(shape / eff) / np.sum((shape / eff) ** 2))
        err = float(np.sum(((e_max * shape - eff) / eff) ** 2))
        if err < best[0]:
            best = (err, e_max, half / 1e9)
    return best[1], best[2]


def attention_times(
    timer: Timer, x: Shape, dtype: torch.dtype, device: torch.device
) -> dict[str, tuple[float, float]]:
    """SDPA causal forward/backward per backend that runs here (q, k, v as the runtime's block has them)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    head_dim = x.h // x.heads
    q, k, v = (torch.randn(x.b, x.heads, x.s, head_dim, dtype=dtype, device=device) for _ in range(3))
    backends = {
        "default": (None, True),
        "flash": (SDPBackend.FLASH_ATTENTION, True),
        "flash,no-mask": (SDPBackend.FLASH_ATTENTION, False),  # what a causal mask saves
        "cudnn": (SDPBackend.CUDNN_ATTENTION, True),
        "efficient": (SDPBackend.EFFICIENT_ATTENTION, True),
    }
    out = {}
    for name, (backend, causal) in backends.items():
        if device.type != "cuda" and backend is not None:
            continue

        def sdpa(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: Any = backend, causal: bool = causal
        ) -> torch.Tensor:
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        try:
            out[name] = fwd_bwd(timer, sdpa, q, k, v)
        except RuntimeError as err:  # a backend that does not support this device or dtype
            print(f"  attention backend {name}: not run here ({str(err).splitlines()[0][:90]})")
    return out


def memory_op_times(
    timer: Timer, x: Shape, cfg: ModelConfig, dtype: torch.dtype, device: torch.device
) -> dict[str, tuple[float, float]]:
    """The elementwise ops of a block and the head's cross-entropy, as the runtime's model runs them."""
    tokens, d = x.b * x.s, x.h // x.heads
    hidden = torch.randn(x.b, x.s, x.h, dtype=dtype, device=device)
    norm_class = torch.nn.RMSNorm if cfg.norm == "rmsnorm" else torch.nn.LayerNorm  # as runtime/model.py
    norm = norm_class(x.h, eps=1e-5).to(device, dtype)
    q = torch.randn(x.b, x.heads, x.s, d, dtype=dtype, device=device)
    kv = torch.randn(x.b, x.kv_dim // d, x.s, d, dtype=dtype, device=device)
    gate, up = (torch.randn(tokens, x.ffn, dtype=dtype, device=device) for _ in range(2))
    logits = torch.randn(tokens, x.vocab, dtype=torch.float32, device=device)
    targets = torch.randint(0, x.vocab, (tokens,), device=device)
    times = {"norm1": fwd_bwd(timer, norm, hidden)}
    if x.rope:
        times["rope"] = fwd_bwd(
            timer, lambda a, b: torch.cat([rotary(a).flatten(), rotary(b).flatten()]), q, kv
        )
    if x.swiglu:
        times["swiglu"] = fwd_bwd(timer, lambda a, b: F.silu(a) * b, gate, up)
    else:
        times["gelu"] = fwd_bwd(timer, F.gelu, up)
    times["dropout_residual1"] = fwd_bwd(timer, lambda a, b: a + b, hidden, hidden.clone())
    times["cross_entropy"] = fwd_bwd(timer, lambda z: F.cross_entropy(z, targets), logits)
    return times


def launch_gap_us(device: torch.device, ops: int = 2000) -> float:
    """Device time per tiny eager op when the host issues them back to back (launch + dispatch bound)."""
    a = torch.zeros(1, device=device)

    def chain() -> None:
        for _ in range(ops):
            a.add_(1.0)

    return Timer(device, 3)(chain) / ops * 1e6


def predicted(op: Op, s: Scenario) -> tuple[float, float]:
    """The simulator's forward and backward seconds of `op` (costs/op.py's backward rule)."""
    t = op_seconds(op, s.cluster.gpu, s.cluster.compute, s.training.dtype)
    return t, (pass_multiple(op) - 1.0) * t


def measure(s: Scenario, device: torch.device, repeat: int, sweep: tuple[int, ...]) -> dict[str, Any]:
    x, dtype = Shape.of(s), TORCH_DTYPES[s.training.dtype]
    gpu = s.cluster.gpu
    peak = gpu.peak_flops(s.training.dtype) * gpu.clock_fraction
    timer = Timer(device, repeat)
    ops = {op.name: op for op in (*layer_forward(x), *head_forward(x))}
    rows: list[dict[str, Any]] = []

    def row(
        name: str, kind: str, measured: tuple[float, float], pred: tuple[float, float], **extra: Any
    ) -> None:
        rows.append(
            {
                "op": name,
                "kind": kind,
                "fwd_s": measured[0],
                "bwd_s": measured[1],
                "pred_fwd_s": pred[0],
                "pred_bwd_s": pred[1],
                **extra,
            }
        )

    print("GEMMs at the model's shapes", file=sys.stderr)
    for name, (m, k, n) in gemm_dims(x).items():
        op = ops[name]
        assert abs(op.flops - 2.0 * m * k * n) < 1e-6 * op.flops, (name, op.flops, m, k, n)
        fwd, bwd = gemm_times(timer, m, k, n, dtype, device)
        row(
            name,
            "matmul",
            (fwd, bwd),
            predicted(op, s),
            shape=[m, k, n],
            efficiency_fwd=_fraction(op.flops / peak, fwd),
            efficiency_bwd=_fraction(2 * op.flops / peak, bwd),
        )
    print("GEMM size sweep", file=sys.stderr)
    sweep_rows = []
    for n in sweep:
        fwd, _ = gemm_times(timer, n, n, n, dtype, device)
        if fwd:
            sweep_rows.append(
                {"m": n, "k": n, "n": n, "gflop": 2 * n**3 / 1e9, "efficiency": 2.0 * n**3 / peak / fwd}
            )
    gemm_points = [(r["gflop"] * 1e9, r["efficiency"]) for r in sweep_rows]
    gemm_points += [(2.0 * np.prod(r["shape"]), r["efficiency_fwd"]) for r in rows if r["efficiency_fwd"]]
    f, e = np.array([p[0] for p in gemm_points]), np.array([p[1] for p in gemm_points])
    e_max, half = fit_saturation(f, e)
    print("attention", file=sys.stderr)
    attention = attention_times(timer, x, dtype, device)
    attn = ops["attention"]
    for backend, times in attention.items():
        row(
            f"attention[{backend}]",
            "attention",
            times,
            predicted(attn, s),
            efficiency_fwd=_fraction(attn.flops / peak, times[0]),
            efficiency_bwd=_fraction(2 * attn.flops / peak, times[1]),
        )
    print("memory-bound ops", file=sys.stderr)
    cfg = ModelConfig.from_scenario(s)
    for name, times in memory_op_times(timer, x, cfg, dtype, device).items():
        op = ops[name]
        row(
            name,
            "memory",
            times,
            predicted(op, s),
            bandwidth_fraction_fwd=_fraction(op.bytes / (gpu.hbm_GBps * 1e9), times[0]),
        )
    print("one whole block", file=sys.stderr)
    block = Block(cfg).to(device, dtype)
    hidden = torch.randn(x.b, x.s, x.h, dtype=dtype, device=device)
    fwd, bwd_in, bwd_w = _phase_seconds(layer_forward(x), s)
    row("block", "block", fwd_bwd(timer, block, hidden), (fwd, bwd_in + bwd_w))
    if device.type == "cuda":  # FlashAttention-2, the kernel of the 2023-24 frameworks' published runs
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            row("block[flash]", "block", fwd_bwd(timer, block, hidden), (fwd, bwd_in + bwd_w))
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cluster": s.cluster.preset,
        "gpu": s.cluster.gpu.name,
        "shape": {"seq_len": x.s, "micro_batch": x.b, "dtype": s.training.dtype},
        "torch": torch.__version__,
        "peak_tflops_at_clock": peak / 1e12,
        "compute_model": s.cluster.compute.model_dump(),
        "rows": rows,
        "gemm_sweep": sweep_rows,
        "implied": {
            "matmul_efficiency_isolated": e_max,
            "matmul_half_gflop": half,
            "attention_efficiency": {b: 3 * attn.flops / peak / sum(t) for b, t in attention.items()},
            "op_overhead_us": launch_gap_us(device),
        },
    }


def _fraction(ideal_s: float, measured_s: float) -> float | None:
    """Achieved fraction of the ideal time; None where the measured time is lost in the timer's noise
    (a backward taken as forward + backward minus forward can come out as 0 for a tiny op on CPU)."""
    return ideal_s / measured_s if measured_s > 0 else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--cluster", help="preset whose compute model is checked (default: the one of this GPU)")
    ap.add_argument("--power-limit", type=float, help="board power limit, W (default: read by NVML)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", help="write the full result here")
    ap.add_argument("--kernels", action="store_true", help="run benchmarks/gpu_kernels.py's kernel table")
    args = ap.parse_args(argv)
    if args.kernels:
        from benchmarks import gpu_kernels

        rest = ["--device", args.device, "--repeat", str(args.repeat)]
        rest += [
            f"--{k.replace('_', '-')}={v}"
            for k in ("cluster", "power_limit", "json")
            if (v := getattr(args, k))
        ]
        return gpu_kernels.main(rest)
    device = torch.device(args.device)
    cluster = args.cluster or preset_of(torch.cuda.get_device_name(device) if device.type == "cuda" else "")
    gpu: dict[str, Any] = {}
    if device.type == "cpu":
        gpu = {"name": "cpu-core", "peak_tflops": {"fp32": 0.1}, "hbm_GBps": 10.0, "memory_GiB": 16.0}
        dtype, sweep = "fp32", (128, 256, 512)
    else:
        dtype, sweep = "bf16", SWEEP
        limit = args.power_limit or nvml_power_limit()
        if limit:
            from plancast.simulator.catalog import CLUSTERS, GPUS

            gpu = {**GPUS[str(CLUSTERS[cluster]["gpu"])], "power_limit_W": limit}
    s = scenario(args.model, args.seq, args.micro_batch, cluster, gpu, dtype)
    torch.manual_seed(0)
    result = measure(s, device, args.repeat, sweep)
    result["shape"] = {"model": args.model, **result["shape"]}
    result["cluster"] = cluster
    report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def preset_of(device_name: str) -> str:
    """The cluster preset of a GPU by its CUDA name (the H100 preset where none matches)."""
    for key, preset in (("H200", "hgx-h200"), ("H800", "hgx-h800"), ("A100", "dgx-a100-80gb")):
        if key in device_name:
            return preset
    return "dgx-h100-80gb"


def nvml_power_limit() -> float | None:
    """The GPU's enforced power limit in W, or None where NVML cannot read it."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
