"""The keys of routed experts whose projections carry biases (gpt-oss), and how a framework adds them.

gpt-oss's experts have a bias on both projections (transformers' `GptOssExperts`: gate_up_proj_bias of
2 x intermediate_size, down_proj_bias of hidden_size, per expert; Megatron-Bridge's GPTOSSProvider:
add_bias_linear = True). A grouped GEMM has no per-expert bias, so each framework adds them itself, and
the frameworks differ (costs/expert_bias.py prices each way):

- per_expert_down: Megatron-Core 0.15 and 0.16 (NeMo 25.11 ships dev 0.15.0, 26.02 main 0.16.0:
  Megatron-Bridge docs/releases/software-versions.md), TEGroupedMLP: fc1's bias inside Transformer
  Engine's GroupedLinear (`skip_bias_add=False`), fc2's bias times each token's routing probability added
  by `_apply_bias` one local expert at a time (`torch.split` by tokens_per_expert, `t + b * p` per expert,
  `torch.cat`, `.to(dtype)`: megatron/core/transformer/moe/experts.py at core_v0.15.0 and core_v0.16.0;
  the packed, one-pass path came later, 883533e0).
- per_expert: NeMo AutoModel's GroupedExpertsDeepEP at the commit that published its gpt-oss rows
  (89e3a9fd, nemo_automodel/components/moe/layers.py `_apply_bias`): both projections' biases one local
  expert at a time, fc2's times the routing probability.
- gathered: torchtitan's GptOssGroupedExperts (torchtitan/models/gpt_oss/model/moe.py
  `_run_experts_grouped_mm`): each projection's biases expanded to one row per token by
  `repeat_interleave` and added, one pass a projection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from plancast.simulator.fields import Strict

if TYPE_CHECKING:
    from plancast.simulator.scenario import Scenario

ExpertBiasAdd = Literal["per_expert_down", "per_expert", "gathered"]
"""How the routed experts' biases are added (training.moe_expert_bias_add)."""

FRAMEWORK_BIAS_ADD: dict[str, ExpertBiasAdd] = {
    "megatron-lm": "per_expert_down",  # Megatron-Core 0.15-0.16 TEGroupedMLP._apply_bias
    "torchtitan": "gathered",  # torchtitan GptOssGroupedExperts, repeat_interleave
    # no DeepSpeed gpt-oss expert implementation found: priced as torchtitan's one pass a projection
    "deepspeed": "gathered",
}


class ModelExpertBias(Strict):
    """The model key of biased expert projections."""

    moe_expert_bias: bool = False
    """The routed experts' projections carry biases, one vector per expert and projection (gpt-oss:
    gate_up_proj_bias and down_proj_bias in transformers' GptOssExperts; the gpt-oss-120b preset and
    `plancast import hf` of a gpt_oss config set it). Their parameters are not counted (128 x 8,640 a
    gpt-oss-120b layer, 0.03% of its parameters); what adding them costs depends on the framework
    (training.moe_expert_bias_add)."""


class ExpertBiasTrainingKeys(Strict):
    """The training key of how expert biases are added."""

    moe_expert_bias_add: ExpertBiasAdd | None = None
    """How the framework adds the routed experts' biases (model.moe_expert_bias) around its grouped
    GEMMs (simulator/expert_bias.py has the sources, costs/expert_bias.py the bytes and calls).
    per_expert_down: fc1's bias inside the GEMM, fc2's bias times the routing probability one local
    expert at a time (Megatron-Core 0.15-0.16 TEGroupedMLP). per_expert: both projections' biases one
    local expert at a time (NeMo AutoModel's DeepEP experts). gathered: each projection's biases
    repeated to one row per token and added in one pass (torchtitan's gpt-oss). Unset: the framework's
    (megatron-lm per_expert_down, torchtitan and deepspeed gathered)."""


def expert_bias_add(s: Scenario) -> ExpertBiasAdd | None:
    """How this plan adds expert biases, or None where its model's experts have none."""
    if not (s.model.is_moe and s.model.moe_expert_bias):
        return None
    return s.training.moe_expert_bias_add or FRAMEWORK_BIAS_ADD[s.parallelism.framework]


def probs_bytes(dispatcher: str, d: int) -> int:
    """Bytes of a routing probability where the experts read it: fp32 through DeepEP and HybridEP, which
    take fp32 probabilities only (Megatron-Core token_dispatcher.py `_DeepepManager`: "DeepEP only
    supports float32 probs", cast with `.float()`; NeMo AutoModel's copy, components/moe/megatron/
    token_dispatcher.py, the same); else the router's, `type_as(logits)`, the activation
    dtype `d` unless `moe_router_dtype` says fp32 (Megatron-Core router.py), which no gpt-oss recipe sets."""
    return 4 if dispatcher in ("deepep", "hybridep") else d


def expert_bias_warnings(s: Scenario) -> list[str]:
    """A warning where moe_expert_bias_add is set on a model whose experts carry no biases."""
    if s.training.moe_expert_bias_add is None or (s.model.is_moe and s.model.moe_expert_bias):
        return []
    return [
        "training.moe_expert_bias_add is ignored: it says how routed experts' biases are added, and this "
        "model has none (model.moe_expert_bias is false, or the model is dense); set "
        "model.moe_expert_bias = true, or remove the key"
    ]
