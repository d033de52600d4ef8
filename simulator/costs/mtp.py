"""The multi-token-prediction module (DeepSeek-V3, arXiv 2412.19437, sec. 2.2 and Figure 3): each of
`num_nextn_predict_layers` depths normalises the previous depth's hidden state and the embedding of the
token one further ahead (two RMSNorms), concatenates them, projects 2h -> h (the matrix M_k), runs one
transformer block, and predicts through the shared output head with its own cross-entropy loss. It runs
after the main model on the last pipeline stage, as Megatron-Core places its MTP block
(megatron/core/transformer/multi_token_prediction.py, the post-process stage).
"""

from __future__ import annotations

from plancast.simulator.costs.moe import moe_layer_forward
from plancast.simulator.costs.ops import (
    Op,
    Shape,
    embedding_forward,
    head_forward,
    layer_forward,
    linear,
    norm,
)
from plancast.simulator.scenario import Model
from plancast.simulator.scenario_moe import DROPLESS_IMBALANCE, Dispatcher


def mtp_is_moe(m: Model) -> bool:
    """Whether the MTP block is an MoE block: it follows the main layers (index num_hidden_layers)."""
    return m.is_moe_layer(m.num_hidden_layers)


def mtp_forward(
    x: Shape,
    m: Model,
    ep: int,
    factor: float | None = None,
    *,
    etp: int | None = None,
    imbalance: float | None = None,
    dispatcher: Dispatcher = "alltoall",
    block: tuple[Op, ...] | None = None,
) -> tuple[Op, ...]:
    """One MTP depth, forward, one micro-batch, one tp rank: the shared embedding's lookup, two norms, the
    column-parallel projection [2h -> h], the block (`factor`, `etp`, `imbalance`, `dispatcher` as
    costs/moe.py's; `block`: its ops where the caller built them with those), the shared head and loss."""
    tokens = x.b * x.s
    local_tokens = tokens / x.tp if x.sp else tokens
    load = DROPLESS_IMBALANCE if imbalance is None else imbalance
    if block is None:
        block = (
            moe_layer_forward(x, m, ep, factor, etp=etp, imbalance=load, dispatcher=dispatcher)
            if mtp_is_moe(m)
            else layer_forward(x)
        )
    return (
        *embedding_forward(x),
        norm("mtp_enorm", local_tokens * x.h, x),
        norm("mtp_hnorm", local_tokens * x.h, x),
        *linear("mtp_proj", tokens, 2 * x.h, x.h / x.tp, x),
        *block,
        *head_forward(x),
    )
