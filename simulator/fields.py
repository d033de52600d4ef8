"""What every scenario table shares: the strict pydantic base and the literal types used across tables."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Dtype = Literal["fp32", "fp16", "bf16"]
Recompute = Literal["none", "selective", "full"]


class Strict(BaseModel):
    """The base of every scenario table: unknown keys are errors, values are frozen and type-strict,
    and a field's docstring is its documentation (schema, docs/scenario.md, editor hints)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,
        strict=True,
        use_attribute_docstrings=True,
        allow_inf_nan=False,  # inf/nan anywhere is bad input, never a NaN prediction
    )
