"""HBM bytes and framework calls of adding the routed experts' biases (model.moe_expert_bias, gpt-oss),
one MoE layer's forward on one rank; the sources of each way are in simulator/expert_bias.py.

Per element of the projection's output (rows x width), d the activation dtype's bytes, e the bytes of
`b * p` (bf16 x the routing probability's dtype, promoted: 4 when the probabilities are fp32):

- fc2 bias times the probability, one local expert at a time (`t + b * p` per expert, `torch.cat`,
  `.to(dtype)`): `b * p` writes e; the add reads d + e and writes e; the cat reads and writes e; the cast
  back reads e and writes d where e > d. Calls: two per local expert (the multiply and the add) and the
  cat, plus the cast where e > d. Each call pays the per-op time of any op
  (ComputeModel.op_overhead_us): the per-expert kernels are a few microseconds of HBM each, so their
  issue, not their bytes, sets their time, as costs/moe_gemm.py prices per-expert quantize calls.
- fc1 bias, one local expert at a time (`t + b` per expert, `torch.cat`; AutoModel): the add reads and
  writes d, the cat reads and writes d; one call per local expert and the cat.
- gathered (torchtitan): per projection, `repeat_interleave` writes d an element and the add reads 2d
  and writes d; two calls.

Backward is priced as every memory op's (costs/op.py MEMORY_BACKWARD_FACTOR): the gradients of
`b * p` (a multiply and a row reduction for the bias, the same for the probability) read and write
about what the forward did.

The probabilities' dtype: simulator/expert_bias.py `probs_bytes`.
"""

from __future__ import annotations

from plancast.simulator.costs.ops import Op


def _per_expert_down(elements: float, groups: int, d: int, probs: int) -> Op:
    """fc2's bias times the routing probability, one local expert at a time (module docstring)."""
    e = max(d, probs)
    cast = e > d
    per_element = e + (d + 2 * e) + 2 * e + ((e + d) if cast else 0)
    return Op("expert_down_bias", "memory", 0.0, elements * per_element, calls=2 * groups + 1 + int(cast))


def _per_expert_up(elements: float, groups: int, d: int) -> Op:
    """fc1's bias, one local expert at a time, then the cat (module docstring)."""
    return Op("expert_up_bias", "memory", 0.0, elements * 4 * d, calls=groups + 1)


def _gathered(name: str, elements: float, d: int) -> Op:
    """A projection's biases repeated to one row per token and added (module docstring)."""
    return Op(name, "memory", 0.0, elements * 4 * d, calls=2)


def expert_bias_ops(
    mode: str | None, rows: float, groups: int, h: int, up_width: float, d: int, probs: int
) -> list[Op]:
    """The bias ops of a rank's `groups` local experts over `rows` token rows in all: fc1's output is
    `up_width` wide (2 x the expert width under a gated activation), fc2's `h`; `probs`: the routing
    probabilities' bytes an element. None: the experts have no biases."""
    if mode is None:
        return []
    if mode == "gathered":
        return [_gathered("expert_up_bias", rows * up_width, d), _gathered("expert_down_bias", rows * h, d)]
    down = _per_expert_down(rows * h, groups, d, probs)
    return [down] if mode == "per_expert_down" else [_per_expert_up(rows * up_width, groups, d), down]
