"""A rank's routed experts as the frameworks hold and run them: each projection's weights stacked in one
parameter, every expert's rows computed by one grouped GEMM per projection.

This is torchtitan's ``GroupedExperts`` (torchtitan/models/moe/moe.py): ``w1`` (gate) and ``w3`` (up) of
shape ``(E_local, ffn, hidden)``, ``w2`` (down) of shape ``(E_local, hidden, ffn)``, i.e. each expert's
slice is the ``(out, in)`` weight of the ``nn.Linear`` it replaces, and a GEMM reads it transposed
(column-major B, the layout benchmarks/gpu_grouped_gemm.py measured the kernel in). The activation is
the dense MLP's (runtime/model.py ``MLP``): SwiGLU (gate, up, down), GELU or squared ReLU (up, down); no
biases. Under expert parallelism the module holds the rank's ``E / ep`` experts from ``first_expert``.

Two ways to run the sorted rows: ``grouped_mm``, one ``torch._grouped_mm`` per projection with the
groups' end rows as device-side int32 offsets (no host sync), on CUDA in bf16 as torchtitan's
``_run_experts_grouped_mm``; elsewhere a loop of per-expert matmuls on the stacked weights over the same
offsets (reading them on the host). ``batched`` runs fixed-capacity slots ``(E_local, rows, hidden)`` with
``torch.bmm``. Nothing here touches torch.distributed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812  (the torch convention)
from torch import nn

GROUP_ALIGN_ROWS = 8
"""Rows each expert's group is padded to (bf16: 16 bytes / 2). torch's grouped GEMM needs every group's
extent along a dynamic dimension to be a multiple of 16 bytes and, where that dimension is the
contraction (the weight gradient, 2-D x 2-D), non-empty (pytorch aten/src/ATen/native/cuda/
GroupMMCommon.cuh, prepare_grouped_gemm_data); torchtitan pads the same way (TOKEN_GROUP_ALIGN_SIZE_M = 8,
counts clamped to at least one alignment)."""

PROJECTIONS = {"w1": "gate", "w3": "up", "w2": "down"}
"""Stacked parameter -> the per-expert ``MLP`` projection whose weights it stacks (torchtitan's names)."""


class GroupedExperts(nn.Module):
    """Routed experts ``[first_expert, first_expert + num_local)``, weights stacked per projection."""

    def __init__(
        self, hidden_size: int, ffn_size: int, num_local: int, first_expert: int, activation: str
    ) -> None:
        super().__init__()
        self.num_local, self.first_expert, self.activation = num_local, first_expert, activation
        if activation == "swiglu":
            self.w1 = nn.Parameter(torch.empty(num_local, ffn_size, hidden_size))
        self.w3 = nn.Parameter(torch.empty(num_local, ffn_size, hidden_size))
        self.w2 = nn.Parameter(torch.empty(num_local, hidden_size, ffn_size))

    def __len__(self) -> int:
        return self.num_local

    def expert_names(self, param: str) -> list[str]:
        """Per-expert names of stacked ``param`` as the per-expert modules had them (``"5.gate.weight"``):
        initialisation draws each expert's slice from its own name (runtime/model.py ``init_weights``)."""
        projection = PROJECTIONS[param]
        first = self.first_expert
        return [f"{e}.{projection}.weight" for e in range(first, first + self.num_local)]

    def _weights(self, dtype: torch.dtype) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """(gate or None, up, down) in ``dtype``, each transposed to (E, in, out)."""

        def read(w: torch.Tensor) -> torch.Tensor:
            return w.to(dtype).transpose(-2, -1)

        gate = read(self.w1) if self.activation == "swiglu" else None
        return gate, read(self.w3), read(self.w2)

    def _act(self, gate: torch.Tensor | None, up: torch.Tensor) -> torch.Tensor:
        if gate is not None:
            return F.silu(gate) * up
        if self.activation == "relu2":
            return F.relu(up).square()
        return F.gelu(up)

    def grouped(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Rows of ``x`` grouped by local expert: rows ``[offsets[e-1], offsets[e])`` are expert ``e``'s
        (int32 ends; rows past the last end are padding, their output unspecified)."""
        dtype = compute_dtype(x)
        x = x.to(dtype)
        gate_w, up_w, down_w = self._weights(dtype)
        gate = None if gate_w is None else grouped_mm(x, gate_w, offsets)
        return grouped_mm(self._act(gate, grouped_mm(x, up_w, offsets)), down_w, offsets)

    def batched(self, slots: torch.Tensor) -> torch.Tensor:
        """``(E_local, rows, hidden)`` slots, expert ``e``'s rows in ``slots[e]``: one bmm per projection."""
        dtype = compute_dtype(slots)
        slots = slots.to(dtype)
        gate_w, up_w, down_w = self._weights(dtype)
        gate = None if gate_w is None else torch.bmm(slots, gate_w)
        return torch.bmm(self._act(gate, torch.bmm(slots, up_w)), down_w)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The GEMMs' dtype: autocast's where it is on (the per-expert nn.Linear ran in it), else ``x``'s."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def grouped_mm_available(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether torch's grouped GEMM kernel runs these operands: CUDA, bf16, 16-byte aligned rows."""
    aligned = x.shape[-1] % GROUP_ALIGN_ROWS == 0 and w.shape[-1] % GROUP_ALIGN_ROWS == 0
    return (
        hasattr(torch, "_grouped_mm")
        and x.is_cuda
        and x.dtype == torch.bfloat16
        and w.dtype == torch.bfloat16
        and aligned
    )


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``x`` (rows, k) by group times ``w`` (groups, k, n): group ``g``'s rows times ``w[g]``.

    On CUDA in bf16 one ``torch._grouped_mm`` (offsets stay on the device); elsewhere one matmul per group
    on the same offsets, the rows past the last group zero."""
    if grouped_mm_available(x, w):
        return torch._grouped_mm(x, w, offs=offsets)
    ends = offsets.tolist()  # host sync: the fallback's loop needs the group sizes
    starts = [0, *ends[:-1]]
    parts = [x[s:e] @ w[g] for g, (s, e) in enumerate(zip(starts, ends, strict=True))]
    parts.append(x.new_zeros(x.shape[0] - ends[-1], w.shape[-1]))
    return torch.cat(parts)


def padded_layout(expert: torch.Tensor, num_local: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Where each of the ``expert``-sorted rows goes in the padded grouped buffer, without a host sync.

    ``expert``: the local expert of each row, sorted ascending. Returns (destination row of each row, the
    groups' int32 end offsets, the buffer's static row count). Each group is padded to a multiple of
    ``GROUP_ALIGN_ROWS``, at least one alignment (module docstring), so the buffer needs at most
    ``rows + num_local * GROUP_ALIGN_ROWS`` rows."""
    align = GROUP_ALIGN_ROWS
    # scatter_add, not bincount: CUDA's bincount reads the maximum on the host
    counts = torch.zeros(num_local, dtype=torch.long, device=expert.device).scatter_add_(
        0, expert, torch.ones_like(expert)
    )
    padded = ((counts + align - 1) // align * align).clamp_min(align)
    ends = padded.cumsum(0)
    first_row = counts.cumsum(0) - counts  # of each expert among the sorted rows
    rank_in_group = torch.arange(expert.numel(), device=expert.device) - first_row[expert]
    dest = (ends - padded)[expert] + rank_in_group
    return dest, ends.to(torch.int32), expert.numel() + num_local * align
