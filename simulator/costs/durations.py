"""The engine's per-micro-batch durations of one virtual stage's passes (costs/stage.py StageCost), worked
out once per stage: the engine reads them per action."""

from __future__ import annotations

from dataclasses import dataclass

from plancast.simulator.costs.stage import StageCost


@dataclass(frozen=True, slots=True)
class Durations:
    """A stage's per-micro-batch durations, computed once (the engine reads them per action)."""

    forward_s: float
    recompute_s: float
    backward_s: float  # full backward, or the input-gradient part when the schedule splits it
    backward_weight_s: float
    forward_flops: float
    backward_flops: float
    weight_flops: float
    backward_kind: str

    @classmethod
    def of(cls, cost: StageCost, split: bool) -> Durations:
        """With a split backward the first stage has no input gradient to produce: its B is empty and
        W runs its whole backward (as torch's stage_backward_input/weight do)."""
        # each sum over the segments once (a StageCost property recomputes it per read)
        forward_s, flops = cost.forward_s, cost.forward_flops
        input_s, weight_s = cost.backward_input_s, cost.backward_weight_s
        if split and cost.stage == 0:
            b_s, w_s, b_flops, w_flops = 0.0, input_s + weight_s, 0.0, 2 * flops
        elif split:
            b_s, w_s, b_flops, w_flops = input_s, weight_s, flops, flops
        else:
            b_s, w_s, b_flops, w_flops = input_s + weight_s, 0.0, 2 * flops, 0.0
        return cls(
            forward_s=forward_s,
            recompute_s=cost.recompute_s,
            backward_s=b_s,
            backward_weight_s=w_s,
            forward_flops=flops,
            backward_flops=b_flops,
            weight_flops=w_flops,
            backward_kind="backward_input" if split else "backward",
        )
