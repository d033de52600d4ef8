"""Context-parallel costs: the K/V exchange of one attention layer, one micro-batch, one rank.

Each sequence is cut into 2 * cp chunks and rank i keeps chunks i and 2cp-1-i, so under a causal mask
every rank does the same attention work, 1/cp of the layer's (Megatron-LM context_parallel load
balancing; Llama 3 paper, Dubey et al. 2024 sec. 3.3.2). plancast models the all-gather form Llama 3
chose: before attention the ranks all-gather the K and V of their chunks (one tensor, K and V packed),
attend their queries to the whole sequence, and in backward reduce-scatter dK/dV back to the owners.
The gather is not overlapped with attention (Llama 3 sec. 3.3.2 accepts the exposed all-gather since
K/V are small under GQA), so both sit on the critical path inside the compute span. Everything else of
the layer (GEMMs, elementwise ops, activation memory) works on the rank's s / cp tokens: Shape.of.
"""

from __future__ import annotations

from plancast.simulator.costs.mla import cp_kv_elements_per_token
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.scenario import Scenario


def kv_shard_bytes(s: Scenario) -> int:
    """K and V of this rank's s / cp tokens on one tp rank (kv heads split over tp), packed, or an MLA
    model's compressed latent: the payload it contributes to the forward all-gather."""
    t = s.training
    per_token = cp_kv_elements_per_token(s.model, s.tp)  # K and V, or MLA's latent (costs/mla.py)
    return t.micro_batch_size * (t.seq_len // s.cp) * per_token * DTYPE_BYTES[t.dtype]


def kv_grad_bytes(s: Scenario) -> int:
    """dK and dV of the whole sequence on one tp rank: the tensor entering the backward reduce-scatter."""
    return kv_shard_bytes(s) * s.cp
