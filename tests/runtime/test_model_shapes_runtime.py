"""The runtime's model for the shapes of docs/models.md: multi-head latent attention, a declared head_dim
and squared ReLU hold exactly the parameters the simulator counts, register them in the order its DDP
buckets assume, train (gradients reach every weight), and plans it does not run are refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from plancast.runtime.model import Decoder, ModelConfig
from plancast.runtime.plan import PlanError, check_runtime_support
from plancast.simulator.costs.params import chunk_tensor_bytes, count_parameters
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario

TINY: dict[str, Any] = {
    "model": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 128,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position_embedding": "rope",
        "tie_word_embeddings": False,
    },
    "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_size": 2, "dtype": "fp32"},
    "cluster": {"preset": "local-cpu", "gpus_per_node": 1},
}
MLA = {"kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12}


def _scenario(model: dict[str, Any], **plan: Any) -> Scenario:
    data = {**TINY, "model": {**TINY["model"], **model}}
    if plan:
        data["parallelism"] = plan
        data["cluster"] = {**TINY["cluster"], "gpus_per_node": 2}
    return parse_scenario(data).scenario


SHAPES = {
    "mla": {**MLA, "q_lora_rank": 24},
    "mla-without-q-compression": MLA,
    "head-dim": {"head_dim": 24, "num_key_value_heads": 2},
    "heads-not-dividing-hidden": {"num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16},
    "relu2": {"activation": "relu2", "intermediate_size": 96},
    "qk-layernorm": {"head_dim": 24, "num_key_value_heads": 2, "qk_layernorm": True},
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_runtime_model_holds_what_the_simulator_counts(shape: dict[str, Any]) -> None:
    s = _scenario(shape)
    model = Decoder(ModelConfig.from_scenario(s), 0, 2, has_embedding=True, has_head=True)
    params = list(model.parameters())
    assert sum(p.numel() for p in params) == count_parameters(s.model)
    assert [p.numel() * 4 for p in params] == chunk_tensor_bytes(
        s.model, 1, layers=2, has_embedding=True, has_head=True
    )


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_runtime_model_trains_every_weight(shape: dict[str, Any]) -> None:
    s = _scenario(shape)
    model = Decoder(ModelConfig.from_scenario(s), 0, 2, has_embedding=True, has_head=True, seed=3)
    tokens = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    assert logits.shape == (2, 32, 128)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 128), tokens.reshape(-1)).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_mla_attention_is_causal() -> None:
    """A later token cannot change an earlier token's output."""
    s = _scenario({**MLA, "q_lora_rank": 24})
    model = Decoder(ModelConfig.from_scenario(s), 0, 2, has_embedding=True, has_head=True, seed=1)
    tokens = torch.randint(0, 128, (1, 32), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[0, 20] = (changed[0, 20] + 1) % 128
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.equal(a[0, :20], b[0, :20]) and not torch.equal(a[0, 20:], b[0, 20:])


@pytest.mark.parametrize(
    ("model", "plan", "message"),
    [
        (MLA, {"tensor_parallel_degree": 2}, "set parallelism.tensor_parallel_degree = 1"),
        (MLA, {"context_parallel_degree": 2}, "set parallelism.context_parallel_degree = 1"),
        (
            {"num_nextn_predict_layers": 1},
            {"pipeline_parallel_degree": 2},
            "model.num_nextn_predict_layers = 1",
        ),
        ({"sliding_window": 8}, {"pipeline_parallel_degree": 2}, "model.sliding_window = 8"),
        (
            {"sliding_window": 8, "layer_types": ["full_attention", "sliding_attention"]},
            {"pipeline_parallel_degree": 2},
            "model.sliding_window = 8",
        ),
    ],
)
def test_shapes_the_runtime_does_not_run_are_refused(
    model: dict[str, Any], plan: dict[str, Any], message: str
) -> None:
    s = _scenario(model, **plan)
    with pytest.raises(PlanError, match=message.replace(".", r"\.")):
        check_runtime_support(s, 2)


def test_a_window_no_layer_uses_runs() -> None:
    """layer_types all full_attention: every layer is the runtime's full causal attention."""
    s = _scenario({"sliding_window": 8, "layer_types": ["full_attention"] * 2}, pipeline_parallel_degree=2)
    check_runtime_support(s, 2)
