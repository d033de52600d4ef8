"""The SimPy engine runs the new schedules exactly as their ideal-link replay says (zero latency, unbounded
bandwidth, uniform stages), V placement included, and the memory model holds each one's activations."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.engine import Engine
from plancast.simulator.engine.spans import Span
from plancast.simulator.loader import parse_scenario, to_toml_dict
from plancast.simulator.schedule_replay import finish_times
from plancast.simulator.schedules import SCHEDULES, Action, ScheduleName, build_schedule
from plancast.simulator.summary import PIPELINE_KINDS
from tests.simulator.test_engine_identities import B, F, ideal, uniform_costs


def _replayed_makespan(name: ScheduleName, pp: int, m: int) -> float:
    """The replay with the engine's per-pass durations: a chunk's forward F / v, its input-gradient and
    weight-gradient passes B / 2v each, except on stage 0, which has no input gradient to produce, so its
    B is empty and its W the whole backward (costs/durations.py Durations.of, as torch's stage_backward_*)."""
    v = 2 if SCHEDULES[name].v_shape else 1

    def cost(a: Action) -> float:
        if a.kind == "F":
            return F / v
        if a.stage == 0:
            return 0.0 if a.kind == "B" else B / v
        return B / (2 * v)

    return max(finish_times(build_schedule(name, pp, m, v), pp * v, cost).values())


@pytest.mark.parametrize("name", ["ZBH2", "ZBV", "DualPipeV"])
@pytest.mark.parametrize(("pp", "m"), [(2, 4), (2, 7), (4, 8), (4, 12)])
def test_engine_runs_the_schedule_as_replayed(name: ScheduleName, pp: int, m: int) -> None:
    v = 2 if SCHEDULES[name].v_shape else 1
    s = ideal(pp, m, name, v)
    spans = Engine(s, costs_override=uniform_costs(s)).run()
    end = max(sp.start_s + sp.dur_s for sp in spans if sp.kind in PIPELINE_KINDS)
    assert end == pytest.approx(_replayed_makespan(name, pp, m), rel=1e-9)
    passes = sorted((sp.rank, sp.kind, sp.stage, sp.microbatch) for sp in spans if sp.kind in PIPELINE_KINDS)
    assert len(passes) == len(set(passes)) == 3 * v * pp * m  # one F, B and W per stage and micro-batch


def test_zb_h2_holds_2p_minus_1_micro_batches_of_activations_on_rank_0() -> None:
    """arXiv 2401.10241 section 2.2: ZB-H2's first rank peaks at (2p - 1) M_B against 1F1B's p M_B."""
    pp = 4
    one_f_one_b = rank_memory(ideal(pp, 16, "1F1B"), 0).activations
    zb_h2 = rank_memory(ideal(pp, 16, "ZBH2"), 0).activations
    assert zb_h2 / one_f_one_b == pytest.approx((2 * pp - 1) / pp, rel=1e-12)


def test_v_placement_puts_the_first_and_last_stage_on_rank_0() -> None:
    """Under ZB-V rank 0 holds the output layer's loss buffers (the last stage) besides the embedding;
    1F1B's rank 0 does not, so with the same in-flight micro-batches its activations are lower."""
    zb_v, one_f_one_b = (rank_memory(ideal(4, 16, n, v), 0) for n, v in (("ZBV", 2), ("1F1B", 1)))
    assert zb_v.activations > one_f_one_b.activations


def _slow_link_spans(name: ScheduleName) -> list[Span]:
    """DualPipeV-sized plan (pp 2, 8 micro-batches) on a 50 ms link with blocking pipeline sends."""
    data = to_toml_dict(ideal(2, 8, name, 2))
    data["cluster"]["tiers"] = [{"name": "slow", "bandwidth_GBps": 1e15, "latency_us": 5e4}]
    data["parallelism"]["overlap_p2p_comm"] = False
    s = parse_scenario(data).scenario
    return Engine(s, costs_override=uniform_costs(s)).run()


def test_paired_forward_does_not_wait_for_its_send() -> None:
    """DualPipe's F&B pair: the backward after a paired forward starts (its gradient receive first)
    when the forward ends, while an unpaired forward's blocking send holds its rank for the transfer."""
    spans = _slow_link_spans("DualPipeV")
    sends = {(sp.rank, sp.stage, sp.microbatch) for sp in spans if sp.kind == "send" and sp.order == 0}
    paired = {
        (a.stage, a.microbatch) for rank in build_schedule("DualPipeV", 2, 8, 2) for a in rank if a.paired
    }
    forwards = [sp for sp in spans if sp.kind == "forward" and (sp.rank, sp.stage, sp.microbatch) in sends]
    gaps = {True: [], False: []}
    for f in forwards:
        after = min(
            (
                sp
                for sp in spans
                if sp.rank == f.rank
                and sp.kind != "send"
                and sp.stream in ("compute", "pp")
                and sp.start_s >= f.start_s + f.dur_s
            ),
            key=lambda sp: sp.start_s,
        )
        gaps[(f.stage, f.microbatch) in paired].append(after.start_s - (f.start_s + f.dur_s))
    assert gaps[True] and gaps[False]
    assert max(gaps[True]) == pytest.approx(0.0, abs=1e-12)
    assert min(gaps[False]) >= 0.05 - 1e-9  # held for the whole 50 ms transfer
