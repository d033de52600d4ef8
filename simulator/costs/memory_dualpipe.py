"""DualPipe's second copy of the model (parallelism.pipeline_parameter_copies = 2), priced on DualPipeV's
order: DualPipe (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.2.1) places stage i and stage pp-1-i of a
pp-stage split on rank i (github.com/deepseek-ai/DualPipe examples/example_dualpipe.py builds each rank's
two modules as `full_modules[rank]` and `full_modules[pp_size - 1 - rank]`), so every stage is held by two
ranks. Its README's table, for the same number of stages: parameters 2x and activations PP + 1 stages on
DualPipe's PP devices, against DualPipeV's 2x parameters and PP + 1 stages on PP / 2 devices."""

from __future__ import annotations

from plancast.simulator.scenario import Scenario


def parameter_stages(s: Scenario, owned: tuple[int, ...]) -> tuple[int, ...]:
    """The virtual stages (DualPipeV's 2 pp chunks) whose parameters a rank holding `owned` keeps. One copy:
    its own chunks. DualPipe: stage j of its pp-stage split is the chunks 2j and 2j + 1, and DualPipe's rank
    j (and its mirror pp-1-j) holds stages j and pp-1-j, which are exactly the chunks of the V's ranks 2j and
    2j + 1 together (DualPipeV is DualPipe cut in half): V rank r keeps the parameters of its own chunks and
    of its neighbour r xor 1's."""
    if s.parallelism.pipeline_parameter_copies == 1:
        return owned
    first, last = min(owned) // 2 * 2, 2 * s.pp - 1
    return (first, first + 1, last - first - 1, last - first)


def optimizer_share(s: Scenario) -> float:
    """The share of the kept stages' optimizer states a rank holds: under ZeRO-1 each stage's states are
    sharded over both copies' ranks (the copies are one parameter set, updated from summed gradients; not
    stated by the report), so one copy's worth; without ZeRO each copy keeps its own."""
    copies, zero = s.parallelism.pipeline_parameter_copies, s.parallelism.zero_stage
    return 1.0 / copies if zero >= 1 else 1.0


def extra_inflight_bytes(s: Scenario, chunk_bytes: dict[int, float]) -> float:
    """Activation bytes DualPipe keeps beyond DualPipeV's in-flight peak: PP + 1 of its stages (two chunks
    each) against DualPipeV's 2 PP + 1 chunks (DualPipe README's table; docs/schedules.md), one chunk more,
    counted as the rank's larger chunk."""
    if s.parallelism.pipeline_parameter_copies == 1:
        return 0.0
    return max(chunk_bytes.values())
