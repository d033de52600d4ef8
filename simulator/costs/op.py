"""One operator's forward work on one rank (`Op`), and how its backward is priced from its forward
(`backward_multiples`): the one rule costs/stage.py, the sweep's floor, DeepSpeed's units, the MFU count
and calibration's rows all read."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Category = Literal["matmul", "attention", "memory"]

MEMORY_BACKWARD_FACTOR = 1.5  # read dy and x, write dx vs read x, write y


@dataclass(frozen=True, slots=True)
class Op:
    """One operator's forward work on one rank."""

    name: str
    category: Category
    flops: float
    bytes: float  # HBM traffic (read + write)
    weight_grad: bool = False  # backward splits into input-grad and weight-grad GEMMs (zero-bubble W)
    fp8: bool = False  # a GEMM run in FP8 (training.fp8, costs/fp8.py)
    peak: str = "fp8"  # the peak_tflops key an fp8 GEMM runs at (training.fp8_recipe)
    rate: float | None = None  # fraction of peak of its kernel, where known per kernel (costs/attention.py)
    # a GEMM kernel's rate over a large GEMM's (costs/moe_gemm.py); a fused attention kernel's at its head
    # width over its rate at head dim 128 (costs/attention.py head_dim_rate)
    relative_rate: float = 1.0
    # framework calls the op is issued as, each paying the per-op time (ComputeModel.op_overhead_us): a
    # grouped GEMM's inputs quantized one expert at a time (costs/moe_gemm.py per_expert_quantize)
    calls: float = 1  # a hybrid's mean block issues an op in a share of its layers (costs/gdn.py)
    # (input-gradient, weight-gradient) time of its backward over its forward's, where it is not its
    # category's (`backward_multiples`): DeepSeek Sparse Attention's indexer, whose inputs are detached
    # and whose scores' backward covers only the pairs its loss reads (costs/dsa.py)
    backward: tuple[float, float] | None = None


def backward_multiples(op: Op) -> tuple[float, float]:
    """(input-gradient, weight-gradient) time of `op`'s backward over its forward's: a GEMM's two
    backward GEMMs are each its forward's size (Narayanan et al. 2021 eq. 3: backward = 2x forward), an
    attention core's backward twice its forward (dQ, dK, dV over the same scores; FlashAttention-2 sec.
    3.1), a memory-bound op's MEMORY_BACKWARD_FACTOR; or the op's own `backward`."""
    if op.backward is not None:
        return op.backward
    if op.category == "matmul":
        return 1.0, 1.0
    if op.category == "attention":
        return 2.0, 0.0
    return MEMORY_BACKWARD_FACTOR, 0.0


def pass_multiple(op: Op) -> float:
    """Forward plus backward time of `op` over its forward's (1 + both `backward_multiples`)."""
    grad_in, grad_w = backward_multiples(op)
    return 1.0 + grad_in + grad_w


def in_share(op: Op, share: float) -> Op:
    """`op` as a mean block issues it when only `share` of the model's layers run it (its work, traffic
    and calls scaled: a hybrid's Gated DeltaNet layers, costs/gdn.py; DeepSeek Sparse Attention's indexer
    under index sharing, costs/dsa.py)."""
    if share == 1.0:
        return op
    return replace(op, flops=op.flops * share, bytes=op.bytes * share, calls=op.calls * share)
