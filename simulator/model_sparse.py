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

    @property
    def is_sparse_attention(self) -> bool:
        """Whether attention is DeepSeek Sparse Attention."""
        return self.index_topk is not None


def sparse_attention_problems(m: ModelSparseAttention, is_mla: bool) -> list[PlanProblem]:
    """DSA keys given in part, or without the multi-head latent attention they run over (Megatron-Core's
    `experimental_attention_variant = "dsa"` is an MLA variant, as DeepSeek-V3.2's and GLM-5's are)."""
    given = [k for k in DSA_KEYS if getattr(m, k) is not None]
    if not given:
        return []
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
