"""Accelerator presets. Every number cites the vendor datasheet it comes from.

Peaks are dense (no structured sparsity) tensor-core TFLOP/s per dtype; HBM bandwidth in GB/s
(10^9 bytes/s); memory in GiB as the driver reports it (nvidia-smi total).

`power_W` is the datasheet's maximum board power (TDP). `price_usd_per_hour` is an on-demand rental list
price per GPU-hour in USD, from the public listing named beside it (as of the date given; prices move,
so set `cluster.gpu.price_usd_per_hour` to what you pay). GPUs without a cited price leave it unset.
Headroom (`reserved_GiB`, `fragmentation`): a job never fills all of it. The first CUDA call creates
the context, ~0.7 GiB with PyTorch's kernels loaded (723 MiB for a one-element tensor,
discuss.pytorch.org/t/73021); NCCL keeps NCCL_BUFFSIZE = 4 MiB per channel and peer connection
(NCCL environment-variable docs), ~1 GiB over a 3D plan's tp, pp, dp and embedding communicators,
more on Hopper/Blackwell where NVLink SHARP (NVLS) registers its own buffers; the caching
allocator's split blocks leave part of the rest unusable (PyTorch "CUDA semantics", memory
management and `expandable_segments`), taken as 5%. CPU ranks: no device context, no headroom.
"""

from __future__ import annotations

from pathlib import Path

from plancast.simulator.catalog import sourced

_HEADROOM = {"reserved_GiB": 1.7, "fragmentation": 0.05}  # context 0.7 + NCCL 1.0
_HEADROOM_NVLS = {"reserved_GiB": 2.2, "fragmentation": 0.05}  # context 0.7 + NCCL with NVLS 1.5

GPUS: dict[str, dict[str, object]] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156, FP16/BF16 312 TFLOP/s dense;
    # 40GB SXM: HBM2 1,555 GB/s; 80GB SXM: HBM2e 2,039 GB/s.
    "A100-SXM4-40GB": {
        "peak_tflops": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
        "hbm_GBps": 1555.0,
        "memory_GiB": 40.0,
        "power_W": 400.0,  # A100 datasheet: 400 W (SXM)
        "price_usd_per_hour": 1.29,  # Jarvislabs on-demand list, April 2026
        **_HEADROOM,
    },
    "A100-SXM4-80GB": {
        "peak_tflops": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
        "hbm_GBps": 2039.0,
        "memory_GiB": 80.0,
        "power_W": 400.0,
        "price_usd_per_hour": 1.49,  # Jarvislabs on-demand list, April 2026
        **_HEADROOM,
    },
    # A100 80GB PCIe, same datasheet: same tensor peaks, HBM2e 1,935 GB/s.
    "A100-PCIE-80GB": {
        "peak_tflops": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
        "hbm_GBps": 1935.0,
        "memory_GiB": 80.0,
        "power_W": 300.0,  # A100 datasheet: 300 W (PCIe 80GB)
        **_HEADROOM,
    },
    # NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5: FP32 67, TF32 494.7, BF16/FP16 989.4,
    # FP8 1,978.9 TFLOP/s dense; HBM3 3.35 TB/s; 80 GB (nvidia-smi: 81,559 MiB).
    "H100-SXM5-80GB": {
        "peak_tflops": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9},
        "hbm_GBps": 3350.0,
        "memory_GiB": 79.6,
        "power_W": 700.0,  # H100 datasheet: up to 700 W (SXM)
        "price_usd_per_hour": 2.99,  # Lambda on-demand list, May 2026
        **_HEADROOM_NVLS,
    },
    # H800 SXM5: the export variant of the H100 SXM5, same tensor cores and HBM3, NVLink cut to 400 GB/s
    # bidirectional (NVIDIA H800 product brief 2023; DeepSeek-V3 technical report, arXiv 2412.19437,
    # sec. 3.1-3.2: H800 nodes, NVLink + IB); the link lives in the hgx-h800 cluster preset.
    "H800-SXM5-80GB": {
        "peak_tflops": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9},
        "hbm_GBps": 3350.0,
        "memory_GiB": 79.6,
        "power_W": 700.0,  # as the H100 SXM5 it derives from
        **_HEADROOM_NVLS,
    },
    # Same datasheet, H100 PCIe: FP32 51, TF32 378, BF16/FP16 756, FP8 1,513 TFLOP/s; HBM2e 2 TB/s.
    "H100-PCIE-80GB": {
        "peak_tflops": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0},
        "hbm_GBps": 2000.0,
        "memory_GiB": 79.6,
        "power_W": 350.0,  # H100 datasheet: 300-350 W (PCIe)
        **_HEADROOM_NVLS,
    },
    # NVIDIA H200 datasheet (2024): H100 SXM compute; HBM3e 4.8 TB/s; 141 GB (nvidia-smi: 143,771 MiB).
    "H200-SXM-141GB": {
        "peak_tflops": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9},
        "hbm_GBps": 4800.0,
        "memory_GiB": 140.4,
        # MAMF (stas00/ml-engineering compute/accelerator/README.md): FP8 1453.4 of 1979 (73.4%) vs BF16
        # 80.3% ("H200 is the same" as the H100's 794.5)
        "fp8_gemm_ratio": round(0.734 / 0.803, 3),
        "power_W": 700.0,  # H200 datasheet: up to 700 W (SXM)
        "price_usd_per_hour": 4.54,  # Spheron on-demand list, 17 March 2026
        **_HEADROOM_NVLS,
    },
    # One x86 core as a rank (gloo on CPU). Nominal: AVX2 with two FMA ports at ~3 GHz =
    # 2 ports x 8 fp32 lanes x 2 FLOP x 3e9 = 96 GFLOP/s (Intel 64 and IA-32 Optimization Reference
    # Manual, Haswell and later). `plancast calibrate` replaces it with what this machine measures.
    "cpu-core": {
        "peak_tflops": {"fp32": 0.096, "bf16": 0.096, "fp16": 0.096, "tf32": 0.096},
        "hbm_GBps": 10.0,  # one core's share of a DDR4/DDR5 socket's stream bandwidth, order of magnitude
        "memory_GiB": 8.0,  # a budget per rank on a 24 GiB, 2-core test machine
    },
}

# Blackwell and AMD Instinct presets, each number with its source (gpus.toml; `plancast catalog --json`).
SOURCED_GPUS, GPU_SOURCES = sourced.load(Path(__file__).with_name("gpus.toml"))
GPUS.update(SOURCED_GPUS)
