"""Measured rate of the routed experts' GEMMs on one GPU (issue 31): a rank's E/ep experts as one grouped
GEMM (`torch._grouped_mm`, the kernel torchtitan's GroupedExperts calls), as a loop of per-expert
cuBLAS GEMMs on one stream, and as Transformer Engine's multi-stream path issues them (one cuBLAS GEMM
per expert, expert i on compute stream i % 4, forked from and joined back to the caller's stream by
events: TE common/gemm/cublaslt_gemm.cu `nvte_multi_stream_cublas_gemm`, common/util/multi_stream.cpp
`num_compute_streams = 4`), the last both eager (the host issuing every GEMM) and replayed as a CUDA
graph (device time alone), at the published MoE rows' expert shapes (rows per expert x hidden x expert
width, BF16, forward orientation) and at TE PR #2045's two H100 points (N 768, K 2048), each as a
fraction of one 8192^3 GEMM's rate on the same GPU. The graphed multi-stream rate over the grouped one
is what costs/moe_gemm.py `multi_stream_relative` reads from TE's table, measured here below 2,048 rows
an expert too (the ModelZoo's TP 4 plan runs 512); eager over graphed says how far the host's issue
of per-expert GEMMs alone slows them.

    python -m benchmarks.gpu_grouped_gemm --json out.json

benchmarks/results/gpu_grouped_gemm_h200.json is this measurement on an H200 (torch 2.11, CUDA 13.0),
run as an inline copy of these lines (the device's checkout lacked the new file); costs/moe_gemm.py
prices BF16 grouped expert GEMMs from it. Needs a CUDA torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

# (label, groups, rows per expert, K, N): gate+up (K = hidden, N = 2 x width), down (K = width, N =
# hidden) of the published rows (benchmarks/published_moe*.py); the last two: one GEMM of q30's total.
SHAPES: tuple[tuple[str, int, int, int, int], ...] = (
    ("q30 mbs1 gu", 16, 2048, 2048, 1536),
    ("q30 mbs1 dn", 16, 2048, 768, 2048),
    ("q30 mbs2 gu", 16, 4096, 2048, 1536),
    ("q30 mbs2 dn", 16, 4096, 768, 2048),
    ("q235 ep32 gu", 4, 4096, 4096, 3072),
    ("q235 ep32 dn", 4, 4096, 1536, 4096),
    ("q235 tp4 gu", 16, 512, 4096, 3072),
    ("q235 tp4 dn", 16, 512, 1536, 4096),
    ("oss120 gu", 16, 1024, 2880, 5760),
    ("oss120 dn", 16, 1024, 2880, 2880),
    ("dsv3 gu", 4, 8192, 7168, 4096),
    ("dsv3 dn", 4, 8192, 2048, 7168),
    ("big1 same tot as q30 gu", 1, 32768, 2048, 1536),
    ("big1 same tot as q30 dn", 1, 32768, 768, 2048),
    ("te2045 16x2048", 16, 2048, 2048, 768),  # TE PR #2045: multi-stream 553.9, CUTLASS 636.9 TFLOP/s
    ("te2045 8x4096", 8, 4096, 2048, 768),  # TE PR #2045: multi-stream 627.9, CUTLASS 650.6 TFLOP/s
)
TE_COMPUTE_STREAMS = 4
"""Transformer Engine's compute streams for grouped GEMMs (common/util/multi_stream.cpp)."""
REFERENCE = 8192  # one square GEMM of this size: the rate the fractions are of


def _time_ms(fn: Callable[[], Any], iters: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / iters


def te_stream_of(expert: int) -> int:
    """The compute stream Transformer Engine issues local expert `expert`'s GEMM on: round robin."""
    return expert % TE_COMPUTE_STREAMS


def multi_stream_gemms(chunks: Sequence[Any], weights: Any, outs: Sequence[Any]) -> Callable[[], None]:
    """One GEMM per expert, `chunks[i] @ weights[i]` into `outs[i]`, as TE's multi-stream path issues
    them on CUDA: the compute streams wait on an event of the caller's stream, expert i runs on stream
    te_stream_of(i), the caller waits on every stream. On CPU the same GEMMs in order, one stream."""
    import torch

    def serial() -> None:
        for i, x in enumerate(chunks):
            torch.mm(x, weights[i], out=outs[i])

    if not chunks or chunks[0].device.type != "cuda":
        return serial
    streams = [torch.cuda.Stream() for _ in range(min(TE_COMPUTE_STREAMS, len(chunks)))]
    fork = torch.cuda.Event()

    def issue() -> None:
        caller = torch.cuda.current_stream()
        fork.record(caller)
        for stream in streams:
            stream.wait_event(fork)
        for i, x in enumerate(chunks):
            with torch.cuda.stream(streams[te_stream_of(i)]):
                torch.mm(x, weights[i], out=outs[i])
        for stream in streams:
            caller.wait_stream(stream)

    return issue


def _graphed(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` captured once as a CUDA graph (warmed up on a side stream first, as torch's docs ask):
    its replay, which issues the captured kernels with no host work per kernel."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def _multi_stream_rates(chunks: Sequence[Any], w: Any, flops: int, ref_tflops: float) -> dict[str, Any]:
    """TE's multi-stream issue of the experts' GEMMs, eager and graphed, as fractions of the reference."""
    import torch

    outs = [torch.empty(x.shape[0], w.shape[-1], device=x.device, dtype=x.dtype) for x in chunks]
    issue = multi_stream_gemms(chunks, w, outs)
    row: dict[str, Any] = {"ms_eager_frac": flops / _time_ms(issue) / 1e9 / ref_tflops}
    try:
        row["ms_graph_frac"] = flops / _time_ms(_graphed(issue)) / 1e9 / ref_tflops
    except RuntimeError as err:  # a capture this torch or driver refuses
        row["ms_graph_err"] = str(err)[:120]
    return row


def _shape_row(label: str, groups: int, rows: int, k: int, n: int, ref_tflops: float) -> dict[str, Any]:
    import torch

    dev, bf16 = torch.device("cuda"), torch.bfloat16
    x = torch.randn(groups * rows, k, device=dev, dtype=bf16)
    w = torch.randn(groups, k, n, device=dev, dtype=bf16)
    flops, chunks = 2 * groups * rows * k * n, x.split(rows)
    loop = flops / _time_ms(lambda: [chunks[i] @ w[i] for i in range(groups)]) / 1e9
    row: dict[str, Any] = {"shape": label, "groups": groups, "rows": rows, "k": k, "n": n}
    row |= {"loop_tflops": loop, "loop_frac": loop / ref_tflops}
    row |= _multi_stream_rates(chunks, w, flops, ref_tflops)
    try:
        wt = w.transpose(-2, -1).contiguous().transpose(-2, -1)  # column-major B, as the kernel reads it
        offs = torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * rows
        grouped = flops / _time_ms(lambda: torch._grouped_mm(x, wt, offs=offs)) / 1e9
        row |= {"grouped_tflops": grouped, "grouped_frac": grouped / ref_tflops}
    except (RuntimeError, AttributeError) as err:  # a torch without the grouped kernel
        row["err"] = str(err)[:120]
    return row


def measure() -> list[dict[str, Any]]:
    import torch

    dev, bf16 = torch.device("cuda"), torch.bfloat16
    a = torch.randn(REFERENCE, REFERENCE, device=dev, dtype=bf16)
    b = torch.randn(REFERENCE, REFERENCE, device=dev, dtype=bf16)
    ref_tflops = 2 * REFERENCE**3 / _time_ms(lambda: a @ b) / 1e9
    return [{"shape": f"ref {REFERENCE}^3", "tflops": ref_tflops}] + [
        _shape_row(*shape, ref_tflops) for shape in SHAPES
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grouped expert GEMM rates on one GPU (issue 31)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.gpu_grouped_gemm needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = measure()
    print(torch.cuda.get_device_name(), torch.__version__, "ref TF", round(rows[0]["tflops"]))
    for r in rows[1:]:
        print(
            r["shape"],
            r["groups"],
            r["rows"],
            r["k"],
            r["n"],
            round(r["loop_frac"], 3),
            round(r.get("grouped_frac", 0), 3),
            "multi-stream eager / graphed",
            round(r["ms_eager_frac"], 3),
            round(r.get("ms_graph_frac", 0), 3),
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
