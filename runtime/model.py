"""A GPT/Llama-style decoder built from a scenario's ``[model]`` section (nanoGPT-sized, one file).

The same ``Decoder`` class is the whole model (single-process reference) and one pipeline chunk:
it holds the global layers ``[first_layer, last_layer)`` keyed by their global index, plus the
token/position embedding when it is the first chunk and the final norm + output projection when it
is the last. Parameter names are therefore identical in a chunk and in the whole model, which lets
tests compare a parallel run with the reference name by name.

Weights are initialised per parameter from a generator seeded by ``(seed, name)``, so a chunk built
on its own rank holds exactly the weights of the same parameters in the whole model. Tokens are
synthetic, drawn from ``training.seed`` and the step number. Nothing here touches torch.distributed.
Linear layers have no bias (as Llama; GPT-2/3 biases are left out so tensor-parallel plans stay uniform).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F  # noqa: N812  (the torch convention)
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from plancast.runtime.attention import attention_core, rotary
from plancast.runtime.mla import MLAConfig, MLAttention
from plancast.runtime.moe import MoE, MoEConfig
from plancast.runtime.moe_experts import GroupedExperts
from plancast.runtime.parallel.loss import vocab_parallel_cross_entropy
from plancast.simulator.costs.recompute import recomputed_layers
from plancast.simulator.scenario import Scenario


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The model hyper-parameters the runtime needs, resolved from ``scenario.model``."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_size: int
    vocab_size: int
    activation: str
    norm: str
    position_embedding: str
    max_positions: int
    tie_embeddings: bool
    selective_recompute: bool = False
    """Recompute the attention core in backward (Korthikanti et al. 2022, "selective")."""
    checkpointed_layers: int = 0
    """Partial recompute (training.recompute_num_layers; simulator/costs/recompute.py): the first n blocks
    of each stage are checkpointed, each group re-run inside its backward."""
    checkpoint_group: int = 1
    """Blocks per checkpoint: 1 for Megatron-LM's block method, recompute_num_layers for uniform."""
    moe: MoEConfig | None = None
    """Mixture-of-experts feed-forward (runtime/moe.py); None for a dense model."""
    declared_head_dim: int = 0
    """model.head_dim when the scenario declares one (Qwen3, gpt-oss); 0: hidden_size / num_heads."""
    mla: MLAConfig | None = None
    """Multi-head latent attention (runtime/mla.py); None: grouped-query attention."""
    qk_layernorm: bool = False
    """RMSNorm over each query and key head (model.qk_layernorm, Qwen3)."""

    @property
    def head_dim(self) -> int:
        return self.declared_head_dim or self.hidden_size // self.num_heads

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> ModelConfig:
        m = scenario.model
        declared = "head_dim" in m.model_fields_set or m.is_mla
        if not declared and m.hidden_size % m.num_attention_heads != 0:
            raise ValueError(
                f"model.hidden_size ({m.hidden_size}) must be divisible by model.num_attention_heads "
                f"({m.num_attention_heads})"
            )
        if m.num_attention_heads % m.kv_heads != 0:
            raise ValueError(
                f"model.num_attention_heads ({m.num_attention_heads}) must be a multiple of "
                f"model.num_key_value_heads ({m.kv_heads})"
            )
        if m.position_embedding == "learned" and scenario.training.seq_len > m.max_position_embeddings:
            raise ValueError(
                f"training.seq_len ({scenario.training.seq_len}) exceeds model.max_position_embeddings "
                f"({m.max_position_embeddings}); raise max_position_embeddings or use rope"
            )
        return cls(
            hidden_size=m.hidden_size,
            num_layers=m.num_hidden_layers,
            num_heads=m.num_attention_heads,
            num_kv_heads=m.kv_heads,
            ffn_size=m.ffn_size,
            vocab_size=m.vocab_size,
            activation=m.activation,
            norm=m.norm,
            position_embedding=m.position_embedding,
            max_positions=m.max_position_embeddings,
            tie_embeddings=m.tie_word_embeddings,
            selective_recompute=scenario.training.recompute == "selective",
            checkpointed_layers=recomputed_layers(scenario, m.num_hidden_layers),
            checkpoint_group=(
                scenario.training.recompute_num_layers or 1
                if scenario.training.recompute_method == "uniform"
                else 1
            ),
            moe=_moe_config(scenario),
            declared_head_dim=m.qk_head_dim if "head_dim" in m.model_fields_set else 0,
            mla=_mla_config(scenario),
            qk_layernorm=m.qk_layernorm,
        )


def _mla_config(scenario: Scenario) -> MLAConfig | None:
    m = scenario.model
    if m.kv_lora_rank is None:
        return None
    return MLAConfig(
        q_lora_rank=m.q_lora_rank or 0,
        kv_lora_rank=m.kv_lora_rank,
        qk_nope_head_dim=m.qk_nope_head_dim or 0,
        qk_rope_head_dim=m.qk_rope_head_dim or 0,
        v_head_dim=m.value_head_dim,
    )


def _moe_config(scenario: Scenario) -> MoEConfig | None:
    m = scenario.model
    if not m.num_local_experts:
        return None
    return MoEConfig(
        num_experts=m.num_local_experts,
        top_k=m.num_experts_per_tok,
        expert_ffn_size=m.moe_intermediate_size or m.ffn_size,
        num_shared=m.n_shared_experts,
        first_dense=m.first_k_dense_replace,
        aux_loss_coef=m.router_aux_loss_coef,
        capacity_factor=m.moe_capacity_factor,
    )


def _norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.hidden_size, eps=1e-5)
    return nn.LayerNorm(cfg.hidden_size, eps=1e-5)


class ContextHook(Protocol):
    """Context parallelism's view of one rank's sequence shard (runtime/parallel/cp.py)."""

    positions: torch.Tensor
    """Global position of each local token."""
    mask: torch.Tensor
    """(local queries, gathered keys) bool: True where a query may attend (causal in global positions)."""

    def gather_kv(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every rank's K and V along the sequence, in the order ``mask`` expects."""


class Attention(nn.Module):
    """Grouped-query causal self-attention; head counts are read from the (possibly sharded) weights."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.head_dim
        self.wq = nn.Linear(cfg.hidden_size, cfg.num_heads * d, bias=False)
        self.wk = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * d, bias=False)
        self.wv = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * d, bias=False)
        self.wo = nn.Linear(cfg.num_heads * d, cfg.hidden_size, bias=False)
        # Qwen3's per-head RMSNorm of queries and keys (modeling_qwen3.py q_norm / k_norm)
        self.q_norm = nn.RMSNorm(d, eps=1e-6) if cfg.qk_layernorm else None
        self.k_norm = nn.RMSNorm(d, eps=1e-6) if cfg.qk_layernorm else None
        self.context: ContextHook | None = None
        """Set by ``runtime.parallel.cp`` when the sequence is split over context-parallel ranks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]
        d = self.cfg.head_dim
        q = self.wq(x).view(b, s, -1, d).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, d).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, d).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        ctx, mask = self.context, None
        if self.cfg.position_embedding == "rope":
            positions = ctx.positions if ctx is not None else None
            q, k = rotary(q, positions=positions), rotary(k, positions=positions)
        if ctx is not None:
            k, v = ctx.gather_kv(k, v)
            mask = ctx.mask
        groups = q.shape[1] // k.shape[1]
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        if self.cfg.selective_recompute and torch.is_grad_enabled():
            out = checkpoint(attention_core, q, k, v, mask, use_reentrant=False)
        else:
            out = attention_core(q, k, v, mask)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    """GELU (two matrices, GPT), squared ReLU (two, Nemotron; So et al. 2021, arXiv 2109.08668) or SwiGLU
    (three, Llama; Shazeer 2020, arXiv 2002.05202)."""

    def __init__(self, cfg: ModelConfig, ffn_size: int | None = None) -> None:
        super().__init__()
        ffn = cfg.ffn_size if ffn_size is None else ffn_size
        self.swiglu = cfg.activation == "swiglu"
        self.relu2 = cfg.activation == "relu2"
        self.up = nn.Linear(cfg.hidden_size, ffn, bias=False)
        if self.swiglu:
            self.gate = nn.Linear(cfg.hidden_size, ffn, bias=False)
        self.down = nn.Linear(ffn, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        if self.relu2:
            return self.down(F.relu(self.up(x)).square())
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)).

    The feed-forward is an MoE layer (this rank's ``ep_rank``-th share of its experts) when the model
    has experts and ``layer`` is past its first dense layers.
    """

    def __init__(self, cfg: ModelConfig, layer: int = 0, ep_rank: int = 0, ep: int = 1) -> None:
        super().__init__()
        self.attn_norm = _norm(cfg)
        self.attn: nn.Module = Attention(cfg) if cfg.mla is None else _mla(cfg, cfg.mla)
        self.mlp_norm = _norm(cfg)
        self.mlp: nn.Module = (
            MLP(cfg)
            if cfg.moe is None or not cfg.moe.is_moe_layer(layer)
            else MoE(
                cfg.hidden_size,
                cfg.moe,
                lambda ffn: MLP(cfg, ffn),
                activation=cfg.activation,
                ep_rank=ep_rank,
                ep=ep,
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def _mla(cfg: ModelConfig, mla: MLAConfig) -> MLAttention:
    return MLAttention(
        cfg.hidden_size,
        cfg.num_heads,
        mla,
        rope=cfg.position_embedding == "rope",
        selective_recompute=cfg.selective_recompute,
    )


class Embedding(nn.Module):
    """Token embedding plus learned absolute positions (GPT) or nothing (rope applies in attention)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.pos = (
            nn.Embedding(cfg.max_positions, cfg.hidden_size) if cfg.position_embedding == "learned" else None
        )
        self.positions: torch.Tensor | None = None
        """Global positions of the tokens (set by ``runtime.parallel.cp``); None = 0..s-1."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        if self.pos is not None:
            positions = self.positions
            if positions is None:
                positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = x + self.pos(positions)
        return x


class Head(nn.Module):
    """Final norm and output projection to the vocabulary (its weight may be the token embedding's)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = _norm(cfg)
        self.output = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.norm(x))


class Decoder(nn.Module):
    """Layers ``[first_layer, last_layer)`` of the decoder, with the embedding and/or head if held.

    ``forward`` takes token ids (first chunk) or hidden states and returns hidden states, or logits
    when the chunk holds the head. With tied embeddings the head's weight *is* ``embed.tok.weight``
    when both live in this chunk; a last chunk without the embedding keeps its own copy under the
    same name (``head.output.weight`` initialised as ``embed.tok.weight``), which the pipeline keeps
    in sync by summing the two gradients (Megatron-LM's embedding group). With experts, the MoE layers
    hold expert-parallel rank ``ep_rank``'s share (of ``ep``) of the routed experts.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        first_layer: int,
        last_layer: int,
        *,
        has_embedding: bool,
        has_head: bool,
        seed: int = 0,
        ep_rank: int = 0,
        ep: int = 1,
    ) -> None:
        super().__init__()
        if not 0 <= first_layer <= last_layer <= cfg.num_layers:
            raise ValueError(f"layer range [{first_layer}, {last_layer}) is outside 0..{cfg.num_layers}")
        self.cfg = cfg
        self.embed = Embedding(cfg) if has_embedding else None
        self.layers = nn.ModuleDict(
            {str(i): Block(cfg, i, ep_rank, ep) for i in range(first_layer, last_layer)}
        )
        self.head = Head(cfg) if has_head else None
        if self.head is not None and self.embed is not None and cfg.tie_embeddings:
            self.head.output.weight = self.embed.tok.weight
        init_weights(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        layers = tuple(self.layers.values())
        checkpointed = self.cfg.checkpointed_layers if torch.is_grad_enabled() else 0
        group, i = self.cfg.checkpoint_group, 0
        while i < len(layers):
            if i < checkpointed:
                x = checkpoint(_run_layers, layers[i : i + group], x, use_reentrant=False)
                i += group
            else:
                x = layers[i](x)
                i += 1
        if self.head is not None:
            x = self.head(x)
        return x


def _run_layers(layers: tuple[nn.Module, ...], x: torch.Tensor) -> torch.Tensor:
    """One checkpointed group of blocks, in order."""
    for layer in layers:
        x = layer(x)
    return x


def init_weights(module: nn.Module, seed: int) -> None:
    """Initialise every parameter from a generator seeded by ``(seed, canonical name)``.

    Normal(0, 0.02) for matrices and embeddings (GPT-2), ones for norm weights, zeros for biases.
    A tied head copy uses the embedding's name so both copies start equal. A stacked expert parameter
    (runtime/moe_experts.py) draws each expert's slice from that expert's own name, so every expert
    starts as it would alone and an expert-parallel rank holds the whole model's slice.
    """
    cfg: ModelConfig | None = getattr(module, "cfg", None)
    with torch.no_grad():
        for name, param in module.named_parameters():
            canonical = name
            if name == "head.output.weight" and cfg is not None and cfg.tie_embeddings:
                canonical = "embed.tok.weight"
            owner_path, attr = name.rsplit(".", 1) if "." in name else ("", name)
            owner = module.get_submodule(owner_path)
            if isinstance(owner, GroupedExperts):
                names = [f"{owner_path}.{n}" for n in owner.expert_names(attr)]
                value = torch.stack([_initial(n, param.shape[1:], seed, cfg) for n in names])
            else:
                value = _initial(canonical, param.shape, seed, cfg)
            param.copy_(value.to(param.device, param.dtype))


def _initial(name: str, shape: torch.Size, seed: int, cfg: ModelConfig | None) -> torch.Tensor:
    """The initial value of parameter ``name`` (``init_weights``)."""
    if "norm" in name:
        return torch.ones(shape) if name.endswith("weight") else torch.zeros(shape)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    std = 0.02
    if name.endswith(("wo.weight", "down.weight")) and cfg is not None:
        std = 0.02 / math.sqrt(2 * cfg.num_layers)  # GPT-2 scaled residual projections
    return torch.randn(shape, generator=gen) * std


def synthetic_batch(scenario: Scenario, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's global batch: (inputs, targets), each (global_batch_size, seq_len) int64.

    Drawn from ``training.seed`` and ``step`` so every rank (and the reference) sees the same data.
    """
    t = scenario.training
    gen = torch.Generator().manual_seed(t.seed * 7919 + step)
    tokens = torch.randint(0, scenario.model.vocab_size, (t.global_batch_size, t.seq_len + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def microbatch(scenario: Scenario, batch: torch.Tensor, dp_rank: int, mb: int) -> torch.Tensor:
    """Rows of ``batch`` for data-parallel rank ``dp_rank``, micro-batch ``mb``."""
    b, m = scenario.training.micro_batch_size, scenario.num_microbatches
    start = (dp_rank * m + mb) * b
    return batch[start : start + b]


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy; logits sharded over the vocabulary (a tensor-parallel head with
    ``parallelism.vocab_parallel``) take the vocab-parallel loss, which never gathers them."""
    if isinstance(logits, DTensor):
        return vocab_parallel_cross_entropy(logits, targets)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
