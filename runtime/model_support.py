"""The model shapes the runtime executes (torch-free, beside runtime/plan.py's plan checks).

The runtime runs head_dim, squared ReLU and multi-head latent attention (runtime/mla.py) on one
tensor-parallel rank, and no dropout module (runtime/model.py); what it does not run it refuses, naming
the key and the fix, so that a run is always the plan that was predicted.
"""

from __future__ import annotations

from plancast.simulator.model_dropout import dropout_probabilities
from plancast.simulator.model_window import sliding_layer_share
from plancast.simulator.scenario import Scenario


class ShapeSupportError(ValueError):
    """A model shape the runtime does not execute; runtime/plan.py reports it as a PlanError."""


def check_model_shape_support(scenario: Scenario) -> None:
    """Raise ShapeSupportError for MLA under tensor or context parallel, per-head q/k norms under tensor
    parallel, sliding-window, DeepSeek sparse and Gated DeltaNet attention, the attention output gate, the
    MTP module and dropout."""
    m = scenario.model
    _check_dropout(scenario)
    if m.is_mla and scenario.tp > 1:
        raise ShapeSupportError(
            "model.kv_lora_rank (multi-head latent attention) with tensor_parallel_degree > 1: the runtime "
            "does not split MLA's projections over tensor parallel; set parallelism.tensor_parallel_degree "
            "= 1 to run this plan (the simulator prices it)"
        )
    if m.is_mla and scenario.cp > 1:
        raise ShapeSupportError(
            "model.kv_lora_rank (multi-head latent attention) with context_parallel_degree > 1: the runtime "
            "does not exchange MLA's latent between context-parallel ranks; set "
            "parallelism.context_parallel_degree = 1 to run this plan"
        )
    if m.qk_layernorm and scenario.tp > 1:
        raise ShapeSupportError(
            "model.qk_layernorm with tensor_parallel_degree > 1: the runtime's per-head query/key norms "
            "are not part of its tensor-parallel plan; set parallelism.tensor_parallel_degree = 1 to run "
            "this plan"
        )
    if sliding_layer_share(m, m.num_hidden_layers):
        raise ShapeSupportError(
            f"model.sliding_window = {m.sliding_window}: the runtime's attention is full causal on every "
            "layer; remove model.sliding_window, or mark every layer 'full_attention' in model.layer_types, "
            "to run this plan (the simulator prices the window)"
        )
    if m.is_sparse_attention:
        raise ShapeSupportError(
            f"model.index_topk = {m.index_topk} (DeepSeek Sparse Attention): the runtime's MLA attends to "
            "the whole causal prefix and has no indexer; remove index_topk, index_n_heads and "
            "index_head_dim to run this plan (the simulator prices the sparse attention)"
        )
    if m.has_linear_attention or m.attn_output_gate:
        raise ShapeSupportError(
            "model.linear_* (Gated DeltaNet layers) or model.attn_output_gate: the runtime's blocks are "
            "ungated softmax attention; remove the linear_* keys, the 'linear_attention' layer_types and "
            "attn_output_gate to run this plan (the simulator prices them)"
        )
    if m.num_nextn_predict_layers:
        raise ShapeSupportError(
            f"model.num_nextn_predict_layers = {m.num_nextn_predict_layers}: the runtime does not run the "
            "multi-token-prediction module; set it to 0 to run this plan (the simulator prices it)"
        )


def _check_dropout(scenario: Scenario) -> None:
    """The runtime's decoder has no dropout module (as torchtitan's), while the simulator prices the masks
    a dropout above 0 writes and keeps (simulator/model_dropout.py): such a run would not be the plan."""
    framework = scenario.parallelism.framework
    probabilities = dropout_probabilities(scenario.model, framework)
    for key, p in zip(("hidden_dropout", "attention_dropout"), probabilities, strict=True):
        if p > 0:
            unset = getattr(scenario.model, key) is None
            why = f" (unset: parallelism.framework = {framework!r} defaults it)" if unset else ""
            raise ShapeSupportError(
                f"model.{key} = {p:g}{why}: the runtime's model applies no dropout; set model.hidden_dropout "
                "= 0 and model.attention_dropout = 0 to run this plan (the simulator prices the masks)"
            )
