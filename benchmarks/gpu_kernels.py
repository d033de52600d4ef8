"""The kernel rates issue 32 names, measured on this machine's GPU beside the rate the simulator prices:

- GEMMs in bf16 and in FP8 under each scaling the FP8 recipes use (costs/fp8.py RECIPES): per-tensor
  (Transformer Engine's delayed / current scaling, torchao tensorwise), row-wise (torchao rowwise) and
  DeepSeek-V3's blockwise 1x128 / 128x128 (TE Float8BlockScaling), at square sizes and at the GEMM shapes of
  published runs (Llama 3 8B and 70B at tp 8, a DeepSeek-V3 expert);
- the casts that feed an FP8 GEMM, as eager PyTorch runs them (an upper bound of TE's fused
  cast-transpose kernel), against the HBM time of the recipe's `cast_bytes`;
- causal attention (SDPA, per backend: FlashAttention-2, cuDNN, memory-efficient) over the causal half of
  the scores, the count costs/attention.py uses, at sequence lengths 2K-16K, with head widths 128 and
  MLA's 192/128.

Each row prints measured TFLOP/s, the fraction of the preset's peak it reaches (at the clock the board's
power limit allows), and the simulator's time for the same op under the preset (costs/efficiency.py
op_seconds). FP8 attention is not measured: SDPA has no FP8 path; it needs Transformer Engine.

Run: `python -m benchmarks.gpu_kernels [--json out.json]`; `--device cpu` runs bf16 GEMMs and attention
at small shapes (no FP8) so the test suite exercises it without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812  (the torch convention)

from benchmarks.gpu_ops import Timer, fwd_bwd, nvml_power_limit, preset_of
from plancast.simulator.cluster import Cluster
from plancast.simulator.costs.attention import CAUSAL_FRACTION, fused_attention_rate, head_dim_rate
from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.fp8 import RECIPES
from plancast.simulator.costs.ops import Op
from plancast.simulator.loader import parse_scenario

SQUARE = (2048, 4096, 8192, 16384)
# (name, m, k, n) of published runs' GEMMs: Llama 3 8B at 2 x 8192 tokens (torchtitan's H100 rows), Llama 3
# 70B at tp 8 on 4096 tokens, a DeepSeek-V3 expert (hidden 7168, width 2048) at 4096 routed tokens.
MODEL_GEMMS = (
    ("llama3-8b qkv", 16384, 4096, 6144),
    ("llama3-8b gate_up", 16384, 4096, 28672),
    ("llama3-8b down", 16384, 14336, 4096),
    ("llama3-70b/tp8 qkv", 4096, 8192, 1280),
    ("llama3-70b/tp8 gate_up", 4096, 8192, 7168),
    ("llama3-70b/tp8 down", 4096, 3584, 8192),
    ("deepseek-v3 expert gate_up", 4096, 7168, 4096),
    ("deepseek-v3 expert down", 4096, 2048, 7168),
)
ATTENTION_SEQS = (2048, 4096, 8192, 16384)
ATTENTION_TOKENS = 16384  # micro-batch x seq held fixed, so every length does the same GEMM-like work
FP8 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # largest finite float8_e4m3fn (OCP FP8 spec)


def cluster_of(preset: str, power_limit: float | None) -> Cluster:
    """The preset's cluster, at the board's power limit where NVML reads one."""
    gpu: dict[str, Any] = {}
    if power_limit:
        from plancast.simulator.catalog import CLUSTERS, GPUS

        gpu = {"gpu": {**GPUS[str(CLUSTERS[preset]["gpu"])], "power_limit_W": power_limit}}
    data = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8},
        "parallelism": {},
        "cluster": {"preset": preset, "num_nodes": 1, **gpu},
    }
    return parse_scenario(data, "gpu_kernels").scenario.cluster


def quantize(x: torch.Tensor, scale_shape: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 tensor, float32 decode scales) of x scaled per tensor, per row, per 1x128 tile along K or per
    128x128 block, the layouts torch's scaled_mm takes for each."""
    xf = x.float()
    if scale_shape == "tensor":
        amax = xf.abs().amax().clamp(min=1e-12)
    elif scale_shape == "row":
        amax = xf.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
    elif scale_shape == "1x128":
        amax = xf.unflatten(1, (-1, 128)).abs().amax(dim=2).clamp(min=1e-12)  # (rows, K/128)
    else:  # 128x128
        blocks = xf.unflatten(0, (-1, 128)).unflatten(2, (-1, 128))
        amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # (rows/128, K/128)
    scale = amax / E4M3_MAX
    if scale_shape == "1x128":
        expanded = scale.repeat_interleave(128, dim=1)
    elif scale_shape == "128x128":
        expanded = scale.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    else:
        expanded = scale
    return (xf / expanded).to(FP8), scale.float()


def fp8_gemm(recipe: str, m: int, k: int, n: int, device: torch.device) -> Callable[[], torch.Tensor]:
    """Y = X W^T in FP8 with the scaling of `recipe` (tensorwise, rowwise, blockwise), bf16 out."""
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
    if recipe == "blockwise":  # DeepSeek-V3: 1x128 activation tiles, 128x128 weight blocks
        xq, xs = quantize(x, "1x128")
        wq, ws = quantize(w, "128x128")
        xs = xs.t().contiguous().t()  # outer-dim-major scales, as cuBLAS's blockwise kernels read them
        return lambda: F.scaled_mm(
            xq, wq.t(), xs, F.ScalingType.BlockWise1x128, ws.t(), F.ScalingType.BlockWise128x128
        )
    per = "tensor" if recipe == "tensorwise" else "row"
    xq, xs = quantize(x, per)
    wq, ws = quantize(w, per)
    ws = ws if per == "tensor" else ws.t()  # row-wise: (1, n) for the second operand
    return lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)


def gemm_rows(timer: Timer, cluster: Cluster, device: torch.device, fp8: bool) -> list[dict[str, Any]]:
    """bf16 (and FP8 per scaling) forward GEMMs at the square and published shapes."""
    shapes = [(f"square {n}", n, n, n) for n in SQUARE] + list(MODEL_GEMMS)
    if device.type == "cpu":
        shapes = [(f"square {n}", n, n, n) for n in (128, 256)]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    variants = [str(dtype).removeprefix("torch.").replace("bfloat16", "bf16").replace("float32", "fp32")]
    variants += ["tensorwise", "rowwise", "blockwise"] if fp8 else []
    rows = []
    for name, m, k, n in shapes:
        flops = 2.0 * m * k * n
        for variant in variants:
            if variant == variants[0]:
                a, b = (
                    torch.randn(m, k, device=device, dtype=dtype),
                    torch.randn(n, k, device=device, dtype=dtype),
                )
                fn: Callable[[], Any] = lambda a=a, b=b: a @ b.t()  # noqa: E731
            else:
                try:
                    fn = fp8_gemm(variant, m, k, n, device)
                except (RuntimeError, AttributeError, TypeError) as err:
                    print(f"  {name} fp8 {variant}: not run here ({str(err).splitlines()[0][:100]})")
                    continue
            try:
                seconds = timer(fn)
            except (RuntimeError, AttributeError, TypeError) as err:
                print(f"  {name} {variant}: not run here ({str(err).splitlines()[0][:100]})")
                continue
            rows.append(_gemm_row(cluster, name, (m, k, n), variant, flops, seconds))
    return rows


def _gemm_row(
    cluster: Cluster, name: str, mkn: tuple[int, int, int], variant: str, flops: float, seconds: float
) -> dict[str, Any]:
    """One GEMM's measured rate beside the simulator's time for the same op."""
    m, k, n = mkn
    narrow = variant not in ("bf16", "fp32")
    dtype = "bf16" if cluster.gpu.peak_tflops.get("bf16") else "fp32"
    op = Op(name, "matmul", flops, 2.0 * (m * k + k * n + m * n), fp8=narrow, peak="fp8")
    peak = cluster.gpu.peak_flops("fp8" if narrow else dtype) * cluster.gpu.clock_fraction
    predicted = op_seconds(op, cluster.gpu, cluster.compute, dtype)
    return {
        "kind": "gemm",
        "op": name,
        "shape": [m, k, n],
        "variant": variant,
        "seconds": seconds,
        "tflops": flops / seconds / 1e12,
        "fraction_of_peak": flops / peak / seconds,
        "predicted_s": predicted,
        "error": predicted / seconds - 1,
    }


def cast_rows(timer: Timer, cluster: Cluster, device: torch.device) -> list[dict[str, Any]]:
    """Quantizing a 16384 x 8192 bf16 activation per recipe, eager, against the recipe's HBM bytes."""
    x = torch.randn(16384, 8192, device=device, dtype=torch.bfloat16)
    elements = x.numel()
    casts = {
        # TE delayed scaling: the scale is known, one read, FP8 and its transpose written
        "tensorwise_delayed": lambda: ((x * 2.0).to(FP8), (x * 2.0).t().contiguous().to(FP8)),
        # current scaling: an amax pass, then the cast and its transpose
        "tensorwise_current": lambda: quantize(x, "tensor") + quantize(x.t(), "tensor"),
        "rowwise": lambda: quantize(x, "row") + quantize(x.t().contiguous(), "row"),
        "blockwise": lambda: quantize(x, "1x128") + quantize(x.t().contiguous(), "1x128"),
    }
    rows = []
    for name, fn in casts.items():
        cast_bytes = RECIPES[name].cast_bytes(2) * elements  # type: ignore[index]
        op = Op(f"cast[{name}]", "memory", 0.0, cast_bytes)
        seconds = timer(fn)
        predicted = op_seconds(op, cluster.gpu, cluster.compute, "bf16")
        rows.append(
            {
                "kind": "cast",
                "op": f"cast 16384x8192 [{name}]",
                "variant": name,
                "seconds": seconds,
                "model_bytes_GBps": cast_bytes / seconds / 1e9,
                "predicted_s": predicted,
                "error": predicted / seconds - 1,
            }
        )
    return rows


def attention_rows(timer: Timer, cluster: Cluster, device: torch.device) -> list[dict[str, Any]]:
    """Causal SDPA forward and backward per backend, head width 128 (Llama), 192/128 (MLA) and 64 (gpt-oss:
    twice the heads, so the same model width)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    backends["efficient"] = SDPBackend.EFFICIENT_ATTENTION
    if device.type == "cpu":
        backends = {"math": SDPBackend.MATH}
    seqs, tokens, heads = (
        (ATTENTION_SEQS, ATTENTION_TOKENS, 32) if device.type == "cuda" else ((128,), 256, 4)
    )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows = []
    for seq in seqs:
        for qk, v in ((128, 128), (192, 128), (64, 64)):
            if (qk, v) != (128, 128) and seq != 4096 and device.type == "cuda":
                continue  # MLA and head width 64 at one length: their rate, not their curve
            shape = (tokens // seq, heads * 128 // v, seq)
            q, k = (torch.randn(*shape, qk, device=device, dtype=dtype) for _ in range(2))
            val = torch.randn(*shape, v, device=device, dtype=dtype)
            for name, backend in backends.items():

                def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: Any = backend) -> Any:
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                try:
                    fwd, bwd = fwd_bwd(timer, sdpa, q, k, val)
                except RuntimeError as err:
                    why = str(err).splitlines()[0][:80]
                    print(f"  attention {name} s={seq} d={qk}/{v}: not run here ({why})")
                    continue
                rows.append(_attention_row(cluster, name, shape, (qk, v), fwd, bwd))
    return rows


def _attention_row(
    cluster: Cluster, backend: str, shape: tuple[int, int, int], dims: tuple[int, int], fwd: float, bwd: float
) -> dict[str, Any]:
    """Measured causal attention against both of the simulator's rates: FlashAttention-2's over the full
    count (attention_efficiency) and the cuDNN fused kernel's over the causal half (fused_attention_rate)."""
    b, h, s = shape
    full = 2.0 * b * h * s * s * sum(dims)  # QK^T and PV forward over all s x s scores
    causal = CAUSAL_FRACTION * full
    peak = cluster.gpu.peak_flops("bf16" if cluster.gpu.peak_tflops.get("bf16") else "fp32")
    peak *= cluster.gpu.clock_fraction
    fused = fused_attention_rate(cluster.compute, "megatron-lm", True, s)
    if fused:  # the model's head-width factor for Transformer Engine's cuDNN kernel (costs/attention.py)
        fused *= head_dim_rate(dims[0], dims[1], "te")
    both = fwd + bwd  # the simulator's backward is twice the forward: 3 x the forward count in all
    return {
        "kind": "attention",
        "op": f"causal attention s={s} d={dims[0]}/{dims[1]}",
        "variant": backend,
        "seq": s,
        "fwd_s": fwd,
        "bwd_s": bwd,
        "seconds": both,
        "tflops_causal": 3 * causal / both / 1e12,
        "fraction_causal": 3 * causal / peak / both,
        "predicted_full_count_s": 3 * full / (peak * cluster.compute.attention_efficiency),
        "predicted_fused_s": 3 * causal / (peak * fused) if fused else None,
    }


def report(result: dict[str, Any]) -> None:
    """The table docs/calibration.md quotes."""
    print(
        f"{result['device']}  torch {result['torch']}  preset {result['cluster']}  "
        f"power limit {result['power_limit_W']} W  clock fraction {result['clock_fraction']:.3f}"
    )
    print(f"{'op':34} {'variant':18} {'ms':>8} {'TFLOP/s':>8} {'of peak':>8} {'model ms':>9} {'error':>7}")
    for r in result["rows"]:
        if r["kind"] == "gemm":
            print(
                f"{r['op']:34} {r['variant']:18} {r['seconds'] * 1e3:8.3f} {r['tflops']:8.1f} "
                f"{r['fraction_of_peak']:8.3f} {r['predicted_s'] * 1e3:9.3f} {r['error']:+7.1%}"
            )
        elif r["kind"] == "cast":
            print(
                f"{r['op']:34} {r['variant']:18} {r['seconds'] * 1e3:8.3f} {r['model_bytes_GBps']:7.0f}G "
                f"{'':8} {r['predicted_s'] * 1e3:9.3f} {r['error']:+7.1%}"
            )
        else:
            fused = r["predicted_fused_s"]
            fused_txt = f"{fused * 1e3:.3f} ({fused / r['seconds'] - 1:+.1%})" if fused else "-"
            print(
                f"{r['op']:34} {r['variant']:18} {r['seconds'] * 1e3:8.3f} {r['tflops_causal']:8.1f} "
                f"{r['fraction_causal']:8.3f} full-count {r['predicted_full_count_s'] * 1e3:.3f} "
                f"({r['predicted_full_count_s'] / r['seconds'] - 1:+.1%}), cuDNN model {fused_txt}"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", help="preset whose rates are checked (default: the one of this GPU)")
    ap.add_argument("--power-limit", type=float, help="board power limit, W (default: read by NVML)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", help="write every row here")
    ap.add_argument(
        "--parts", default="gemm,cast,attention", help="which tables, comma-separated (default: all three)"
    )
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    if unknown := parts - {"gemm", "cast", "attention"}:
        ap.error(f"--parts: unknown {sorted(unknown)}; choose from gemm, cast, attention")
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    preset = args.cluster or preset_of(name)
    limit = args.power_limit or (nvml_power_limit() if on_gpu else None)
    cluster = cluster_of(preset, limit)
    fp8 = on_gpu and torch.cuda.get_device_capability(device) >= (8, 9)
    timer = Timer(device, args.repeat)
    torch.manual_seed(0)
    rows = gemm_rows(timer, cluster, device, fp8) if "gemm" in parts else []
    if fp8 and "cast" in parts:
        rows += cast_rows(timer, cluster, device)
    if "attention" in parts:
        rows += attention_rows(timer, cluster, device)
    result = {
        "device": name,
        "torch": torch.__version__,
        "cluster": preset,
        "power_limit_W": limit,
        "clock_fraction": cluster.gpu.clock_fraction,
        "compute_model": cluster.compute.model_dump(),
        "rows": rows,
    }
    report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
