"""Cluster presets: a GPU, a node size and the link tiers, innermost first.

Tier bandwidth is per GPU, one direction, in GB/s (10^9 bytes/s). `efficiency` is the fraction of
that bandwidth a large collective achieves on the tier (nccl-tests bus bandwidth / link peak), taken
from nccl-tests all_reduce reports (NVIDIA/nccl-tests issues #175, #178, #212, #228, #290). `size` of
the outermost tier is the whole cluster and is filled in from num_nodes * gpus_per_node.
"""

from __future__ import annotations

from pathlib import Path

from plancast.simulator.catalog import sourced

# Hopper runs attention as FlashAttention-2 kernels at about 35% of peak ("FlashAttention-2 achieves
# only 35% utilization on H100", Shah et al. 2024, FlashAttention-3, abstract), not the A100 fit's 0.54.
# GEMMs: the A100 fit (ComputeModel.matmul_efficiency 0.79) is what GEMMs reach inside training; the best
# isolated bf16 GEMM reaches 86.9% of peak on an A100 SXM and 80.3% on an H100 SXM (Maximum Achievable
# Matmul FLOPS, one benchmark on both: stas00/ml-engineering compute/accelerator/README.md, mamf-finder.py).
# Hopper keeps A100's in-training / isolated ratio, as its NVLink tier does: 0.79 x 80.3 / 86.9 = 0.73.
# The same page measures why: a saturated Hopper settles below the 1830 MHz its peak is quoted at (H200,
# the H100's chip: 834 TFLOP/s in bursts, 755 sustained at its power limit; 794.5 x 755 / 834 = 0.73 too).
A100_FIT_MATMUL_EFFICIENCY = 0.79  # the default of simulator.cluster.ComputeModel.matmul_efficiency
A100_MAMF, H100_MAMF = 0.869, 0.803
# Transformer Engine's causal fused attention (cuDNN) on H100, fwd + bwd over the causal half of the scores
# (benchmarks/results/gpu_ops_h100_*.txt, attention[cudnn]: 0.894 of peak over the full count at seq 8192,
# Llama 3 8B shape; 0.712 at seq 2048, MPT-7B shape): e_max x s / (s + s_half) through both points.
_LONG, _SHORT = (8192, 0.894 / 2), (2048, 0.712 / 2)
_RATIO = _LONG[1] / _SHORT[1]
CUDNN_HALF_SEQ = round(_LONG[0] * _SHORT[0] * (1 - _RATIO) / (_RATIO * _SHORT[0] - _LONG[0]))
# FlexAttention on H100 (Driss Guessous, GTC 2025 session 'FlexAttention', its abstract): forward ~25% and
# backward ~3% faster than FlashAttention-2; fwd+bwd with the backward at 2.5x the forward's FLOPs.
FLEX_OVER_FA2_H100 = round(3.5 / (1 / 1.25 + 2.5 / 1.03), 3)
HOPPER_COMPUTE = {
    "attention_efficiency": 0.35,
    "flex_attention_relative": FLEX_OVER_FA2_H100,
    "fused_attention_efficiency": round(_LONG[1] * (_LONG[0] + CUDNN_HALF_SEQ) / _LONG[0], 3),
    "fused_attention_half_seq": CUDNN_HALF_SEQ,
    "matmul_efficiency": round(A100_FIT_MATMUL_EFFICIENCY * H100_MAMF / A100_MAMF, 3),
}

CLUSTERS: dict[str, dict[str, object]] = {
    # DGX A100 (NVIDIA DGX A100 user guide): 8 GPUs on NVSwitch, NVLink3 600 GB/s bidirectional =
    # 300 GB/s per direction; 8 x HDR 200 Gb/s InfiniBand = 25 GB/s per GPU.
    # nccl-tests busbw: 8 x A100 NVLink 200-233 GB/s -> 0.72 of 300 in isolation; inside training the
    # tensor-parallel all-reduces reach 0.51 (fitted on Korthikanti et al. 2022 Table 4 with the compute
    # model). HDR ~24 GB/s per NIC -> 0.96.
    "dgx-a100-80gb": {
        "gpu": "A100-SXM4-80GB",
        "gpus_per_node": 8,
        "num_nodes": 1,
        "tiers": [
            {"name": "nvlink", "size": 8, "bandwidth_GBps": 300.0, "latency_us": 2.0, "efficiency": 0.61},
            {"name": "infiniband", "bandwidth_GBps": 25.0, "latency_us": 5.0, "efficiency": 0.96},
        ],
    },
    "dgx-a100-40gb": {
        "gpu": "A100-SXM4-40GB",
        "gpus_per_node": 8,
        "num_nodes": 1,
        "tiers": [
            {"name": "nvlink", "size": 8, "bandwidth_GBps": 300.0, "latency_us": 2.0, "efficiency": 0.61},
            {"name": "infiniband", "bandwidth_GBps": 25.0, "latency_us": 5.0, "efficiency": 0.96},
        ],
    },
    # DGX H100 (NVIDIA DGX H100 datasheet): NVLink4 900 GB/s bidirectional = 450 GB/s per direction;
    # 8 x NDR 400 Gb/s = 50 GB/s per GPU. nccl-tests busbw: ring ~365 GB/s -> 0.81 in isolation; in training
    # assumed to keep A100's in-training/isolated ratio (0.61 / 0.72): 0.69. NDR 46-48 -> 0.94.
    "dgx-h100-80gb": {
        "gpu": "H100-SXM5-80GB",
        "gpus_per_node": 8,
        "num_nodes": 1,
        "compute": HOPPER_COMPUTE,
        "tiers": [
            {"name": "nvlink", "size": 8, "bandwidth_GBps": 450.0, "latency_us": 2.0, "efficiency": 0.69},
            {"name": "infiniband", "bandwidth_GBps": 50.0, "latency_us": 5.0, "efficiency": 0.94},
        ],
    },
    # HGX H200: the DGX H100 fabric (NVLink4, NDR 400 Gb/s per GPU) with H200 GPUs (NVIDIA H200 datasheet).
    "hgx-h200": {
        "gpu": "H200-SXM-141GB",
        "gpus_per_node": 8,
        "num_nodes": 1,
        "compute": HOPPER_COMPUTE,
        "tiers": [
            {"name": "nvlink", "size": 8, "bandwidth_GBps": 450.0, "latency_us": 2.0, "efficiency": 0.69},
            {"name": "infiniband", "bandwidth_GBps": 50.0, "latency_us": 5.0, "efficiency": 0.94},
        ],
    },
    # HGX H800 as DeepSeek trained V3 on it (arXiv 2412.19437 sec. 3.2.2): NVLink 400 GB/s bidirectional =
    # 200 GB/s per direction, of which "NVLink (160 GB/s)" is achieved -> 0.8; "IB (50 GB/s)" per GPU
    # (8 x NDR 400 Gb/s), NDR efficiency as the DGX H100's.
    "hgx-h800": {
        "gpu": "H800-SXM5-80GB",
        "gpus_per_node": 8,
        "num_nodes": 1,
        "compute": HOPPER_COMPUTE,
        "tiers": [
            {"name": "nvlink", "size": 8, "bandwidth_GBps": 200.0, "latency_us": 2.0, "efficiency": 0.8},
            {"name": "infiniband", "bandwidth_GBps": 50.0, "latency_us": 5.0, "efficiency": 0.94},
        ],
    },
    # A PCIe server without NVLink: PCIe Gen4 x16 = 32 GB/s per direction raw, ~25 GB/s achieved
    # (PCI-SIG Gen4 spec; nccl-tests on PCIe boxes reach ~0.75-0.8 of raw), one 100 GbE NIC per node
    # shared by 8 GPUs = 1.5625 GB/s per GPU.
    "pcie-a100-80gb": {
        "gpu": "A100-PCIE-80GB",
        "gpus_per_node": 8,
        "num_nodes": 1,
        "tiers": [
            {"name": "pcie", "size": 8, "bandwidth_GBps": 32.0, "latency_us": 5.0, "efficiency": 0.78},
            {"name": "ethernet", "bandwidth_GBps": 1.5625, "latency_us": 15.0, "efficiency": 0.9},
        ],
    },
    # An Ethernet cluster: DGX-style H100 nodes joined by 8 x 100 GbE RoCE (12.5 GB/s per GPU), RoCE
    # latency ~10 us and ~0.85 of line rate for large collectives (NVIDIA Spectrum-X whitepaper, 2023).
    "eth-h100-80gb": {
        "gpu": "H100-SXM5-80GB",
        "gpus_per_node": 8,
        "num_nodes": 1,
        "compute": HOPPER_COMPUTE,
        "tiers": [
            {"name": "nvlink", "size": 8, "bandwidth_GBps": 450.0, "latency_us": 2.0, "efficiency": 0.69},
            {"name": "ethernet", "bandwidth_GBps": 12.5, "latency_us": 10.0, "efficiency": 0.85},
        ],
    },
    # This machine's cores as ranks over gloo (shared memory / loopback TCP). Nominal numbers, to be
    # replaced by `plancast calibrate --microbench`, which measures them: gloo on loopback moves
    # ~1-2 GB/s with ~100-400 us per message, and PyTorch's CPU operators cost ~10 us each to dispatch
    # (seen on this project's 2-core test machines); small CPU GEMMs reach half their peak near 2 MFLOP.
    "local-cpu": {
        "gpu": "cpu-core",
        "gpus_per_node": 2,
        "num_nodes": 1,
        "compute": {
            "matmul_efficiency": 0.8,
            "matmul_half_gflop": 0.002,
            "attention_efficiency": 0.5,
            "memory_efficiency": 0.8,
            "op_overhead_us": 10.0,
            # gloo runs on its own threads; what it takes from the cores is in the measured host costs
            "overlap_slowdown": 0.0,
            "p2p_rendezvous": True,  # gloo's send/recv protocol (simulator/cluster.py)
        },
        "tiers": [
            {"name": "loopback", "size": 2, "bandwidth_GBps": 1.5, "latency_us": 200.0, "efficiency": 1.0},
        ],
    },
}

# Blackwell (DGX/HGX, GB200/GB300 NVL72) and AMD Instinct presets, each number with its source
# (clusters.toml; `plancast catalog --json`).
SOURCED_CLUSTERS, CLUSTER_SOURCES = sourced.load(Path(__file__).with_name("clusters.toml"))
CLUSTERS.update(SOURCED_CLUSTERS)
