"""Mixture-of-experts feed-forward layer: router, capacity dispatch, experts, shared experts.

Routing follows Mixtral (Jiang et al. 2024, arXiv 2401.04088 section 2.1; Hugging Face
``MixtralSparseMoeBlock``): a linear router, softmax over the experts, the top-k kept and their
weights renormalised to sum to one. Dispatch is GShard's fixed-capacity scheme (Lepikhin et al.
2020, arXiv 2006.16668 section 2.2, Algorithm 1): every source rank fills exactly ``capacity`` token
slots per expert, first choices before second choices, tokens in order; assignments past the
capacity are dropped (their weight is lost, the residual carries the token). With
``moe_capacity_factor`` unset the capacity is the local token count, so nothing is ever dropped
(docs/moe.md, the contract between simulator and runtime). Without expert parallelism and without a
capacity factor the layer runs dropless and grouped, as Megatron-Core's GroupedMLP and torchtitan do: the
assignments sorted by expert, each expert computing its own tokens only, one grouped GEMM per projection
(``MoE._grouped``, runtime/moe_experts.py); the slots below are for the expert-parallel all-to-all and
for a capacity factor, run as one batched GEMM per projection.

The slot buffer ``(experts, capacity, hidden)`` is laid out by expert, so expert parallelism is one
``all_to_all_single`` with equal splits to dispatch and one to combine (``ExpertExchange``; the
identity here, ``runtime.parallel.ep`` over gloo/NCCL). Shared experts (DeepSeekMoE, Dai et al. 2024,
arXiv 2401.06066 section 3.2) are one always-on feed-forward of ``n_shared * moe_intermediate_size``.

The load-balancing loss is Switch Transformer's (Fedus et al. 2021, arXiv 2101.03961 eq. 4-6), in the
top-k form of Hugging Face's ``load_balancing_loss_func``: ``E * sum_e f_e * P_e`` with ``f_e`` the
routed assignments per token to expert ``e`` (before capacity drops) and ``P_e`` the mean router
probability. Its gradient enters through ``AuxLossAutoScaler`` (Megatron-Core's
``MoEAuxLossAutoScaler``, megatron/core/transformer/moe/moe_utils.py): the layer's output is returned
unchanged and backward adds ``coef * scale`` to the aux loss's gradient, so pipeline stages need not
carry it to the loss. Nothing here touches torch.distributed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from plancast.runtime.moe_experts import GroupedExperts, compute_dtype, padded_layout


@dataclass(frozen=True, slots=True)
class MoEConfig:
    """The MoE hyper-parameters of a model (``[model]`` keys, Hugging Face names)."""

    num_experts: int
    """``num_local_experts``: routed experts per MoE layer."""
    top_k: int
    """``num_experts_per_tok``."""
    expert_ffn_size: int
    """``moe_intermediate_size`` (resolved)."""
    num_shared: int = 0
    """``n_shared_experts``."""
    first_dense: int = 0
    """``first_k_dense_replace``: the first k layers keep a dense feed-forward."""
    aux_loss_coef: float = 0.0
    """``router_aux_loss_coef``."""
    capacity_factor: float | None = None
    """``moe_capacity_factor``; None = capacity of every local token (no drops)."""

    def is_moe_layer(self, layer: int) -> bool:
        return layer >= self.first_dense

    def capacity(self, local_tokens: int) -> int:
        """Token slots each source rank sends per expert (GShard, arXiv 2006.16668 section 2.2)."""
        if self.capacity_factor is None:
            return local_tokens  # top-k experts are distinct: at most one slot per token and expert
        return math.ceil(self.capacity_factor * local_tokens * self.top_k / self.num_experts)


class ExpertExchange(Protocol):
    """Moves the slot buffer between the ranks holding the experts (identity on one rank)."""

    ep: int
    """Expert-parallel degree: the buffer's expert dimension is split into ``ep`` equal blocks."""

    def dispatch(self, slots: torch.Tensor) -> torch.Tensor:
        """``(E, C, h)`` by destination expert -> ``(ep, E/ep, C, h)``: each source's slots for my experts."""

    def combine(self, slots: torch.Tensor) -> torch.Tensor:
        """The inverse of ``dispatch``: ``(ep, E/ep, C, h)`` expert outputs -> ``(E, C, h)`` at the source."""


class LocalExchange:
    """All experts on this rank: dispatch and combine only reshape."""

    ep = 1

    def dispatch(self, slots: torch.Tensor) -> torch.Tensor:
        return slots.unsqueeze(0)

    def combine(self, slots: torch.Tensor) -> torch.Tensor:
        return slots.squeeze(0)


class AuxLossAutoScaler(torch.autograd.Function):
    """Identity on ``output``; backward gives ``aux_loss`` the gradient ``scale`` (Megatron-Core)."""

    @staticmethod
    def forward(ctx: Any, output: torch.Tensor, aux_loss: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(aux_loss)
        ctx.scale = scale
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        (aux_loss,) = ctx.saved_tensors
        return grad, torch.full_like(aux_loss, ctx.scale), None


@dataclass(frozen=True, slots=True)
class Routing:
    """Where each (token, choice) goes: flat slot ``expert * capacity + position``, kept or dropped."""

    slot: torch.Tensor
    """(k, T) int64 slot index (meaningless where not ``kept``)."""
    kept: torch.Tensor
    """(k, T) bool: within capacity."""
    weight: torch.Tensor
    """(k, T) renormalised router weight."""
    aux_loss: torch.Tensor
    """Scalar Switch load-balancing loss (uncoefficiented)."""


def route(logits: torch.Tensor, top_k: int, capacity: int, *, dropless: bool = False) -> Routing:
    """Top-k routing of ``logits`` (T, E) into ``capacity`` slots per expert (GShard Algorithm 1).

    ``dropless``: no choice can be dropped and only each choice's expert is read (``MoE._grouped``), so the
    arrival order is not computed: it is a scan over a (k T, E) one-hot, which measured 9.5 ms of a 20 ms
    Qwen3-30B-A3B layer on an H200 (docs/calibration.md), work no framework's dropless dispatch does. The
    slots then read ``expert * capacity`` (position 0), every choice kept."""
    tokens, experts = logits.shape
    probs = torch.softmax(logits.float(), dim=-1)
    top_p, top_e = probs.topk(top_k, dim=-1)  # (T, k)
    weight = (top_p / top_p.sum(-1, keepdim=True)).to(logits.dtype).t()  # Mixtral renormalises top-k
    choice = top_e.t()  # (k, T): first choices of every token, then second choices
    # Switch eq. 4-6 in HF's top-k form: f_e counts every routed choice, P_e is the mean probability
    counts = torch.zeros(experts, device=logits.device).index_add_(
        0, choice.reshape(-1), torch.ones(choice.numel(), device=logits.device)
    )
    aux = experts * (counts / tokens * probs.mean(0)).sum()
    if dropless:
        return Routing(choice * capacity, torch.ones_like(choice, dtype=torch.bool), weight, aux)
    one_hot = torch.nn.functional.one_hot(choice, experts)  # (k, T, E)
    position = (one_hot.reshape(-1, experts).cumsum(0).reshape_as(one_hot) - 1) * one_hot
    position = position.sum(-1)  # (k, T): arrival order at the chosen expert
    kept = position < capacity
    slot = choice * capacity + position.clamp(max=capacity - 1)
    return Routing(slot, kept, weight, aux)


class MoE(nn.Module):
    """Routed experts (this rank's share of them) plus shared experts, for one decoder layer.

    ``experts`` holds the experts ``[first_expert, first_expert + E/ep)``, each projection stacked in one
    parameter (``GroupedExperts``): the names equal the whole model's layer, an expert-parallel rank's
    tensors are its slice of the experts (``global_experts``). ``make_ffn`` builds the shared experts;
    ``activation`` is the model's (the routed experts compute what ``make_ffn``'s MLP computes).
    ``exchange`` and ``aux_loss_scale`` are set by whoever parallelizes the model
    (``runtime.parallel.ep``) or trains it.
    """

    def __init__(
        self,
        hidden_size: int,
        moe: MoEConfig,
        make_ffn: Callable[[int], nn.Module],
        *,
        activation: str = "swiglu",
        ep_rank: int = 0,
        ep: int = 1,
    ) -> None:
        super().__init__()
        if moe.num_experts % ep:
            raise ValueError(f"num_local_experts ({moe.num_experts}) must be divisible by ep ({ep})")
        self.moe = moe
        self.router = nn.Linear(hidden_size, moe.num_experts, bias=False)
        local = moe.num_experts // ep
        self.first_expert = ep_rank * local
        self.experts = GroupedExperts(hidden_size, moe.expert_ffn_size, local, self.first_expert, activation)
        self.shared = make_ffn(moe.num_shared * moe.expert_ffn_size) if moe.num_shared else None
        self.exchange: ExpertExchange = LocalExchange()
        self.aux_loss_scale = 1.0
        """Gradient of the aux loss per unit coefficient: 1 / (micro-batches the loss is averaged over)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        capacity = self.moe.capacity(flat.shape[0])
        dropless = self.exchange.ep == 1 and self.moe.capacity_factor is None
        r = route(self.router(flat), self.moe.top_k, capacity, dropless=dropless)
        out = self._grouped(flat, r, capacity) if dropless else self._slots(flat, r, capacity)
        if self.shared is not None:
            out = out + self.shared(flat)
        if self.moe.aux_loss_coef and self.training and torch.is_grad_enabled():
            out = AuxLossAutoScaler.apply(out, r.aux_loss, self.moe.aux_loss_coef * self.aux_loss_scale)
        return out.view(shape)

    def _grouped(self, flat: torch.Tensor, r: Routing, capacity: int) -> torch.Tensor:
        """Dropless on one rank, as the frameworks run it (Megatron-Core's GroupedMLP, torchtitan's
        GroupedExperts): the T x k assignments sorted by expert into a buffer where each expert's rows are
        padded to the grouped GEMM's alignment, one grouped GEMM per projection over them (group ends
        as device offsets, no host sync), the weighted outputs added back per token."""
        tokens, hidden = flat.shape
        expert = r.slot.reshape(-1) // capacity  # (k T,): capacity = T here, so slot // T is the expert
        order = torch.argsort(expert, stable=True)
        source = torch.arange(tokens, device=flat.device).repeat(self.moe.top_k)[order]
        dest, offsets, rows = padded_layout(expert[order], len(self.experts))
        x = flat.to(compute_dtype(flat))  # under autocast the copies move bf16, as the frameworks' permute
        buffer = x.new_zeros(rows, hidden).index_copy(0, dest, x[source])
        outputs = self.experts.grouped(buffer, offsets)[dest]
        weighted = outputs * r.weight.reshape(-1)[order].unsqueeze(-1)
        return weighted.new_zeros(tokens, hidden).index_add(0, source, weighted)

    def _slots(self, flat: torch.Tensor, r: Routing, capacity: int) -> torch.Tensor:
        """GShard's fixed-capacity slots, laid out by expert for the expert-parallel all-to-all; the
        local experts run every source's slots as one batched GEMM per projection."""
        tokens, hidden = flat.shape
        experts, ep, local = self.moe.num_experts, self.exchange.ep, len(self.experts)
        src = torch.arange(tokens, device=flat.device).expand(self.moe.top_k, tokens)[r.kept]
        slot = r.slot[r.kept]
        slots = flat.new_zeros(experts * capacity, hidden).index_copy(0, slot, flat[src])
        received = self.exchange.dispatch(slots.view(experts, capacity, hidden))  # (ep, local, C, h)
        by_expert = received.transpose(0, 1).reshape(local, ep * capacity, hidden)
        outputs = self.experts.batched(by_expert).view(local, ep, capacity, hidden).transpose(0, 1)
        returned = self.exchange.combine(outputs.contiguous())
        picked = returned.reshape(experts * capacity, hidden)[slot] * r.weight[r.kept].unsqueeze(-1)
        return picked.new_zeros(tokens, hidden).index_add(0, src, picked)  # autocast: the experts' dtype


def moe_layers(model: nn.Module) -> list[MoE]:
    """Every MoE layer of ``model``, in registration (layer) order."""
    return [m for m in model.modules() if isinstance(m, MoE)]


def set_aux_loss_scale(model: nn.Module, scale: float) -> None:
    """The aux-loss gradient per unit coefficient of every MoE layer (1 / micro-batches averaged over)."""
    for layer in moe_layers(model):
        layer.aux_loss_scale = scale


def is_expert_param(name: str) -> bool:
    """Whether parameter ``name`` belongs to a routed expert (reduced over expert-data-parallel ranks)."""
    return ".experts." in name


def global_experts(model: nn.Module, name: str) -> slice | None:
    """The global experts stacked parameter ``name`` of ``model`` holds (its rows in the whole model's
    tensor of that name), or None for a parameter that is not a routed expert's."""
    if not is_expert_param(name):
        return None
    experts = model.get_submodule(name.rsplit(".", 1)[0])
    if not isinstance(experts, GroupedExperts):
        return None
    return slice(experts.first_expert, experts.first_expert + experts.num_local)


def by_global_expert(model: nn.Module, entries: dict[str, Any]) -> dict[str, Any]:
    """``entries`` keyed by parameter name (a state dict, or an optimizer's per-parameter state), each
    stacked expert entry split into one per global expert (``name.e``, views of it); the rest as is.
    Expert-parallel ranks hold the same names for different experts, and torch.distributed.checkpoint
    writes one tensor per key (its planner de-duplicates replicated keys), so a checkpoint keys experts
    by their global index (runtime/checkpoint.py)."""
    out: dict[str, Any] = {}
    for name, value in entries.items():
        rows = global_experts(model, name)
        if rows is None:
            out[name] = value
            continue
        for i, e in enumerate(range(rows.start, rows.stop)):
            out[f"{name}.{e}"] = _expert_row(value, i)
    return out


def _expert_row(value: Any, i: int) -> Any:
    """Row ``i`` of a stacked tensor (or of each tensor of an optimizer's state); scalars as they are."""
    if isinstance(value, dict):
        return {k: _expert_row(v, i) for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value[i]
    return value  # AdamW's step count: one scalar per parameter
