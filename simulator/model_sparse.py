"""The `[model]` keys of DeepSeek Sparse Attention (DSA; Hugging Face config.json names): a lightning
indexer scores every earlier token for each query, and the attention core reads only the `index_topk`
best (DeepSeek-V3.2, arXiv 2512.02556 sec. 2.1, eq. 1-2). DeepSeek-V3.2 (config.json: index_n_heads 64,
index_head_dim 128, index_topk 2048) and GLM-5 (`glm_moe_dsa`) declare them, over multi-head latent
attention (model_shapes.py). `model_shapes.ModelShapes` inherits them; costs/dsa.py prices them.
"""

from __future__ import annotations

from pydantic import Field

from plancast.simulator.fields import Strict
from plancast.simulator.schedules import PlanProblem

DSA_KEYS = ("index_topk", "index_n_heads", "index_head_dim")
"""The three keys a DSA model declares together."""

DSA_BOUNDS: dict[str, tuple[float, float, str]] = {
    "model.index_topk": (1, 100_000_000, "tokens a query attends to (DeepSeek-V3.2: 2048)"),
    "model.index_n_heads": (1, 100_000, "indexer heads (DeepSeek-V3.2: 64)"),
    "model.index_head_dim": (1, 100_000, "indexer head width (DeepSeek-V3.2: 128)"),
}
"""validation.BOUNDS entries of these keys (key path -> (min, max, why))."""


class ModelSparseAttention(Strict):
    """DeepSeek Sparse Attention's keys (all three or none)."""

    index_topk: int | None = Field(default=None, gt=0)
    """Keys each query's attention reads: the top-k of its indexer scores (DeepSeek-V3.2: 2048). Unset:
    dense attention over the whole causal prefix. A query with fewer earlier tokens reads them all. Its
    kernels are fused ones whatever training.flash_attention says (that key prices the dense core only)."""
    index_n_heads: int | None = Field(default=None, gt=0)
    """The lightning indexer's query heads H^I (DeepSeek-V3.2: 64), each scoring every earlier token's
    one indexer key, ReLU-gated and summed with per-token head weights (eq. 1)."""
    index_head_dim: int | None = Field(default=None, gt=0)
    """Width of an indexer query head and of its one key (DeepSeek-V3.2: 128)."""
    index_topk_freq: int = Field(default=1, ge=1)
    """Index sharing (GLM-5.2: 4): one layer in this many computes its top-k with its own indexer, the
    others reuse the last one's and have no indexer (Megatron-Core `dsa_indexer_topk_freq`; which layers:
    `indexer_layer_share`). 1: every layer has its own (DeepSeek-V3.2, GLM-5)."""
    index_skip_topk_offset: int = Field(default=0, ge=0)
    """Index sharing: the layers before this one (1-based) each compute their own top-k (Megatron-Core
    `dsa_indexer_skip_topk_offset`; GLM-5.2: 3)."""

    @property
    def is_sparse_attention(self) -> bool:
        """Whether attention is DeepSeek Sparse Attention."""
        return self.index_topk is not None


def indexer_layer_share(m: ModelSparseAttention, num_layers: int) -> float:
    """Share of the layers that compute their top-k with their own indexer: layer n (1-based) does when
    max(n - max(offset, 1), 0) is a multiple of index_topk_freq, as Megatron-Bridge counts them
    (src/megatron/bridge/training/utils/flop_utils.py `count_indexer_layers`, at 067f987). Costs price every
    block of a stage alike, so a sharing model's blocks carry this share of an indexer (as sliding windows
    and Gated DeltaNet layers are priced at their mean)."""
    if num_layers <= 0 or m.index_topk_freq == 1:
        return 1.0
    offset = max(m.index_skip_topk_offset, 1)
    own = sum(max(n - offset, 0) % m.index_topk_freq == 0 for n in range(1, num_layers + 1))
    return own / num_layers


def sparse_attention_problems(m: ModelSparseAttention, is_mla: bool) -> list[PlanProblem]:
    """DSA keys given in part, or without the multi-head latent attention they run over (Megatron-Core's
    `experimental_attention_variant = "dsa"` is an MLA variant, as DeepSeek-V3.2's and GLM-5's are)."""
    given = [k for k in DSA_KEYS if getattr(m, k) is not None]
    if not given:
        return [
            PlanProblem(
                f"model.{k}",
                "shares DeepSeek Sparse Attention's top-k between layers, but the model has no indexer "
                "(index_topk unset) and the key would change nothing: remove it",
            )
            for k in ("index_topk_freq", "index_skip_topk_offset")
            if getattr(m, k) != ModelSparseAttention.model_fields[k].default
        ]
    if len(given) < len(DSA_KEYS):
        return [
            PlanProblem(
                f"model.{k}",
                "DeepSeek Sparse Attention needs index_topk, index_n_heads and index_head_dim together; set "
                f"{k} from the model's config.json (DeepSeek-V3.2: 2048, 64, 128) or remove the others",
            )
            for k in DSA_KEYS
            if getattr(m, k) is None
        ]
    if not is_mla:
        return [
            PlanProblem(
                "model.index_topk",
                "DeepSeek Sparse Attention runs over multi-head latent attention (DeepSeek-V3.2, GLM-5); "
                "set kv_lora_rank and the MLA head widths, or remove index_topk, index_n_heads and "
                "index_head_dim",
            )
        ]
    return []


def sparse_training_problems(m: ModelSparseAttention, indexer_loss: str | None) -> list[PlanProblem]:
    """training.dsa_indexer_loss on a model without the indexer it trains (it would change nothing)."""
    if indexer_loss is not None and not m.is_sparse_attention:
        return [
            PlanProblem(
                "training.dsa_indexer_loss",
                f"= {indexer_loss!r} trains DeepSeek Sparse Attention's indexer, which this model has not "
                "(model.index_topk unset) and would change nothing: remove it",
            )
        ]
    return []
