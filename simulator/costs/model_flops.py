"""Model FLOPs per token (what MFU counts): dense layers, MoE layers at their active parameters."""

from __future__ import annotations

from collections.abc import Iterable

from plancast.simulator.costs.moe import moe_layer_forward
from plancast.simulator.costs.mtp import mtp_forward
from plancast.simulator.costs.op import Op, pass_multiple
from plancast.simulator.costs.ops import Shape, head_forward, layer_forward
from plancast.simulator.scenario import Scenario


def model_flops_per_token(s: Scenario) -> float:
    """Model FLOPs per token for forward + backward, no recompute: 3x the forward GEMMs and attention
    of every layer plus the logits (Narayanan et al. 2021 eq. 3 generalised; PaLM appendix B). MoE
    layers count the active parameters only: router, top-k experts at the mean load, shared experts
    (as DeepSeek-V3's MFU counts 37B of 671B), never capacity padding or imbalance. The
    multi-token-prediction depths (costs/mtp.py) count as the work they are."""
    x = Shape.of(s)
    fields = {f: getattr(x, f) for f in x.__dataclass_fields__}
    seq = s.training.seq_len
    # the full s x s scores, as eq. 3 counts them, whatever a causal or windowed kernel computes
    # (costs/attention.py)
    flat = Shape(
        **{
            **fields,
            **{"tp": 1, "vocab_tp": 1, "sp": False, "s": seq, "kv_s": seq},
            **{"fused_attention": None, "window_work": 1.0},
        }
    )
    m = s.model
    dense = _pass_flops(layer_forward(flat))
    moe = _pass_flops(moe_layer_forward(flat, m, 1, factor=1.0)) if m.is_moe else dense
    moe_layers = sum(m.is_moe_layer(i) for i in range(m.num_hidden_layers))
    layers = (m.num_hidden_layers - moe_layers) * dense + moe_layers * moe
    if m.num_nextn_predict_layers:  # DeepSeek-V3's multi-token prediction: real work of every step
        layers += m.num_nextn_predict_layers * _pass_flops(mtp_forward(flat, m, 1, factor=1.0))
    head = _pass_flops(head_forward(flat))
    tokens = x.b * seq
    return (layers + head) / tokens


def _pass_flops(ops: Iterable[Op]) -> float:
    """Forward and backward FLOPs of `ops`: each op's times its pass multiple (costs/op.py: 3 for a GEMM
    and an attention core, as eq. 3 counts them; less for DeepSeek Sparse Attention's indexer,
    costs/dsa.py). Memory-bound ops carry no FLOPs."""
    return sum(op.flops * pass_multiple(op) for op in ops if op.category != "memory")
