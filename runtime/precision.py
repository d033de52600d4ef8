"""Mixed precision as PyTorch-native frameworks run it (torchtitan): what `training.dtype` means at run time.

- fp32: everything in fp32.
- bf16: fp32 parameters, gradients and AdamW state (the master weights); the forward pass and the loss
  run under ``torch.autocast(dtype=bfloat16)`` (torch.amp: GEMMs and attention in bf16, reductions
  such as the loss in fp32), backward follows it. This is torchtitan's mixed precision without FSDP
  (torchtitan/distributed/utils.py ``maybe_enable_amp``). Under FSDP2 (ZeRO-2/3) parameters are also
  gathered in bf16 and gradients reduce-scattered in ``parallelism.fsdp_reduce_dtype``
  (``MixedPrecisionPolicy``, torchtitan's FSDP path), so the collectives move the bytes the simulator
  prices. Gradients stay fp32, as the simulator's DDP buckets assume (simulator/units.py).
- fp16 needs a loss scaler, which the runtime does not run: refused by ``runtime.plan``.

The optimizer is AdamW's fused CUDA kernel on a GPU, torchtitan's default (`[optimizer] implementation
= "fused"`, torchtitan/config/job_config.py), one pass over parameters, gradients and both moments as
the simulator prices it (simulator/costs/optimizer.py); on CPU, torch's default loop, which the local
machine's microbenchmarks measure.

Pipeline transfers carry the compute dtype (runtime/parallel/pp.py casts at the send), as Megatron-LM
and torchtitan send bf16 activations and gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from plancast.simulator.scenario import Scenario

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def compute_dtype(scenario: Scenario) -> torch.dtype:
    """The dtype of GEMMs, activations and pipeline transfers."""
    return TORCH_DTYPES[scenario.training.dtype]


def autocast_for(scenario: Scenario, device: torch.device) -> Callable[[], AbstractContextManager[object]]:
    """A factory of the context each forward (and its recompute) runs under."""
    dtype = compute_dtype(scenario)
    if dtype == torch.float32:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype)


def fused_adamw(device: torch.device) -> bool:
    """Whether AdamW runs its fused kernel (CUDA only, see module)."""
    return device.type == "cuda"


def fsdp_policy(scenario: Scenario) -> MixedPrecisionPolicy:
    """FSDP2's gather and reduce-scatter dtypes for the scenario (param_dtype None: the fp32 parameters;
    the reduce dtype is always named, as FSDP2 would otherwise reduce in param_dtype)."""
    param = compute_dtype(scenario)
    return MixedPrecisionPolicy(
        param_dtype=None if param == torch.float32 else param,
        reduce_dtype=TORCH_DTYPES[scenario.fsdp_reduce_dtype],
    )
