"""The event-free path (simulator/engine/fast.py) records the SimPy engine's spans, to 1e-9, on many plans:
every schedule, ZeRO 0-3, tp/sp, cp, ep with overlap, shared links, tied embeddings; and the golden
summaries hold on the SimPy engine too (tests/simulator/test_golden_summaries.py runs the default path).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plancast.simulator.engine import Engine, StepPlan
from plancast.simulator.engine.fast import Ambiguous, FastEngine, blocker
from plancast.simulator.engine.spans import Span
from plancast.simulator.loader import ScenarioError, load_scenario, parse_scenario
from plancast.simulator.predict import EngineRefusedError, run_engine, simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import _base_for
from plancast.simulator.sweep_axes import Plan
from tests.cli_runner import cli_main
from tests.golden import REPO, cases, differences, read_group

REL = 1e-9


def _key(sp: Span) -> tuple[Any, ...]:
    return (sp.rank, sp.stream, sp.kind, sp.stage, sp.chunk, sp.microbatch, sp.order, sp.peer, sp.start_s)


def assert_same_spans(fast: list[Span], slow: list[Span]) -> None:
    """The same spans (as a multiset), every time and size to a relative 1e-9 of the step."""
    assert len(fast) == len(slow), f"{len(fast)} spans event-free, {len(slow)} with SimPy"
    scale = max((sp.start_s + sp.dur_s for sp in slow), default=1.0) or 1.0
    for a, b in zip(sorted(fast, key=_key), sorted(slow, key=_key), strict=True):
        assert a[:8] == b[:8], f"{a} != {b}"
        assert math.isclose(a.start_s, b.start_s, rel_tol=REL, abs_tol=REL * scale), f"{a} != {b}"
        assert math.isclose(a.dur_s, b.dur_s, rel_tol=REL, abs_tol=REL * scale), f"{a} != {b}"
        assert (a.bytes, a.flops) == (b.bytes, b.flops), f"{a} != {b}"


def both(s: Scenario) -> tuple[FastEngine | None, Engine]:
    """The plan run both ways (None: the event-free path gave up on an undecidable instant)."""
    slow = Engine(s)
    slow.run()
    fast = FastEngine(StepPlan.of(s))
    try:
        fast.run()
    except Ambiguous:
        return None, slow
    return fast, slow


def check(s: Scenario) -> bool:
    """Spans, pass counts and gather waits agree; whether the event-free path ran the plan."""
    fast, slow = both(s)
    if fast is None:
        return False
    assert_same_spans(fast.spans, slow.spans)
    assert_same_spans(fast.transfers, slow.transfers)
    assert fast.passes == slow.passes
    assert fast.dp_wait_s.keys() == slow.dp_wait_s.keys()
    for rank, waited in slow.dp_wait_s.items():
        assert math.isclose(fast.dp_wait_s[rank], waited, rel_tol=REL, abs_tol=1e-15)
    return True


SCHEDULES = [("1F1B", 1), ("GPipe", 1), ("Interleaved1F1B", 2), ("ZeroBubble", 1), ("ZBH2", 1), ("ZBV", 2),
             ("DualPipeV", 2)]  # fmt: skip


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A small GPU plan drawn over every axis the engine treats differently."""
    moe = draw(st.booleans())
    tp, pp, dp = (
        draw(st.sampled_from([1, 2])),
        draw(st.sampled_from([1, 2, 4])),
        draw(st.sampled_from([1, 2, 4])),
    )
    schedule, vpp = draw(st.sampled_from(SCHEDULES))
    cp = 1 if moe else draw(st.sampled_from([1, 1, 2]))
    mbs = draw(st.sampled_from([1, 2]))
    m = draw(st.sampled_from([pp, 2 * pp, 2 * pp + 1, 3 * pp]))
    world = tp * pp * dp * cp
    per_node = draw(st.sampled_from([n for n in (1, 2, 4, 8) if world % n == 0 or n > world]))
    per_node = min(per_node, world)
    par: dict[str, Any] = {
        "tensor_parallel_degree": tp,
        "pipeline_parallel_degree": pp,
        "data_parallel_degree": dp,
        "context_parallel_degree": cp,
        "pipeline_parallel_schedule": schedule if pp > 1 else "1F1B",
        "virtual_stages_per_rank": vpp if pp > 1 else 1,
        "sequence_parallel": tp > 1 and draw(st.booleans()),
        "zero_stage": draw(st.sampled_from([0, 1, 2, 3])),
        "overlap_grad_reduce": draw(st.booleans()),
        "overlap_param_gather": draw(st.booleans()),
        "overlap_p2p_comm": draw(st.booleans()),
        "tp_comm_overlap": draw(st.booleans()),
        "fsdp_backward_prefetch": draw(st.sampled_from(["pre", "post"])),
        "framework": draw(st.sampled_from(["megatron-lm", "torchtitan", "deepspeed"])),
    }
    if dp % 2 == 0 and par["zero_stage"] >= 2 and draw(st.booleans()):
        par["data_parallel_replicate_degree"] = 2  # HSDP
    if par["zero_stage"] == 1:
        par["distributed_optimizer"] = draw(st.booleans())  # Megatron's: reduce-scatter + one all-gather
    if moe:
        par["expert_parallel_degree"] = draw(st.sampled_from([e for e in (1, 2, 4) if dp % e == 0]))
        par["moe_overlap_ep_comm"] = draw(st.booleans())
    model: dict[str, Any] = {"preset": "tiny-moe" if moe else "small-gpt"}
    model["tie_word_embeddings"] = draw(st.booleans())
    return {
        "model": model,
        "training": {
            "seq_len": 256,
            "micro_batch_size": mbs,
            "global_batch_size": m * mbs * dp,
            "dtype": "bf16",
            "recompute": draw(st.sampled_from(["none", "selective", "full"])),
        },
        "parallelism": par,
        "cluster": {"preset": "dgx-h100-80gb", "gpus_per_node": per_node, "num_nodes": world // per_node},
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(scenarios())
def test_the_event_free_path_records_the_simpy_spans(data: dict[str, Any]) -> None:
    try:
        s = parse_scenario(data).scenario
    except ScenarioError:
        return  # a combination validation refuses (it says why); nothing to simulate
    check(s)


def test_the_drawn_plans_mostly_run_event_free() -> None:
    """The fallback to SimPy is for rare exact ties, not the common case: of a fixed sample of drawn
    plans, at most one in ten gives up."""
    ran = gave_up = 0
    for seed in range(40):
        data = _fixed(seed)
        try:
            s = parse_scenario(data).scenario
        except ScenarioError:
            continue
        if check(s):
            ran += 1
        else:
            gave_up += 1
    assert ran >= 10
    assert gave_up <= ran // 10, f"{gave_up} of {ran + gave_up} plans fell back to SimPy"


def _fixed(seed: int) -> dict[str, Any]:
    """A deterministic plan of `scenarios` (hypothesis's find with a seed is not stable across versions,
    so the plans are spelled out from the seed here)."""
    tp, pp, dp = (1, 2)[seed % 2], (1, 2, 4)[seed // 2 % 3], (1, 2, 4)[seed // 6 % 3]
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    zero = seed % 4
    world = tp * pp * dp
    per_node = min(2, world)
    return {
        "model": {"preset": "small-gpt", "tie_word_embeddings": seed % 3 == 0},
        "training": {"seq_len": 256, "micro_batch_size": 1, "dtype": "bf16",
                     "global_batch_size": 2 * pp * dp + dp * (seed % 2),
                     "recompute": ("none", "selective", "full")[seed % 3]},
        "parallelism": {"tensor_parallel_degree": tp, "pipeline_parallel_degree": pp,
                        "data_parallel_degree": dp,
                        "pipeline_parallel_schedule": schedule if pp > 1 else "1F1B",
                        "virtual_stages_per_rank": vpp if pp > 1 else 1, "zero_stage": zero,
                        "sequence_parallel": tp > 1, "overlap_grad_reduce": seed % 5 != 0},
        "cluster": {"preset": "dgx-h100-80gb", "gpus_per_node": per_node, "num_nodes": world // per_node},
    }  # fmt: skip


GPU_EXAMPLES = ["deepseek-v3-h800.toml", "gpt3-175b-dgx-a100.toml", "gpt3-1.3b-one-h100.toml",
                "llama3-8b-cp4-128k.toml", "mixtral-8x7b-dgx-h100.toml"]  # fmt: skip


@pytest.mark.parametrize("name", GPU_EXAMPLES)
def test_every_gpu_example_runs_event_free_with_the_simpy_summary(name: str) -> None:
    s = load_scenario(REPO / "examples" / name).scenario
    assert blocker(StepPlan.of(s)) is None
    ran = run_engine(s)
    assert isinstance(ran, FastEngine), f"{name} fell back to SimPy"
    fast = simulate(s, events=False, engine="event-free").summary
    slow = simulate(s, events=False, engine="simpy").summary
    assert differences(slow, fast) == []


def test_cpu_plans_keep_simpy_and_say_why() -> None:
    s = load_scenario(REPO / "examples" / "tiny-local-cpu.toml").scenario
    assert blocker(StepPlan.of(s)) is not None
    assert isinstance(run_engine(s), Engine)
    with pytest.raises(EngineRefusedError, match=r"rendezvous|cores"):
        run_engine(s, engine="event-free")


def test_full_fidelity_keeps_simpy() -> None:
    s = load_scenario(REPO / "examples" / "gpt3-1.3b-one-h100.toml").scenario
    assert isinstance(run_engine(s, full_fidelity=True), Engine)


def test_an_unknown_engine_is_refused_naming_the_choices() -> None:
    s = load_scenario(REPO / "examples" / "gpt3-1.3b-one-h100.toml").scenario
    with pytest.raises(ValueError, match="auto, simpy, event-free"):
        run_engine(s, engine="fast")


SAMPLED = [c for c in cases() if c.sampled and c.group == "published_runs"]


@pytest.mark.parametrize("case", SAMPLED, ids=lambda c: c.name)
def test_golden_summaries_hold_on_the_simpy_engine(case: Any) -> None:
    """The golden data (written by the default path) on SimPy: both paths give the stored summary."""
    golden = read_group(case.group)[case.name]["summary"]
    found = differences(golden, simulate(case.scenario(), events=False, engine="simpy").summary)
    assert not found, "\n".join(found[:20])


def test_the_cli_names_the_engine_choices_on_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    example = str(REPO / "examples" / "gpt3-1.3b-one-h100.toml")
    code, _, err = cli_main("simulate", example, "--engine", "fast")
    assert code == 2
    assert "choose one of auto, simpy, event-free" in err
    monkeypatch.setenv("PLANCAST_ENGINE", "bogus")
    code, _, err = cli_main("simulate", example, "--json")
    assert code == 2
    assert "PLANCAST_ENGINE" in err


def test_the_cli_gives_one_summary_on_either_engine() -> None:
    example = str(REPO / "examples" / "gpt3-1.3b-one-h100.toml")
    outputs = [cli_main("simulate", example, "--json", "--engine", e) for e in ("simpy", "event-free")]
    assert [code for code, _, _ in outputs] == [0, 0]
    assert differences(json.loads(outputs[0][1]), json.loads(outputs[1][1])) == []


def test_the_cli_refuses_event_free_on_a_cpu_plan_naming_why() -> None:
    cpu = str(REPO / "examples" / "tiny-local-cpu.toml")
    code, _, err = cli_main("simulate", cpu, "--engine", "event-free")
    assert code == 2
    assert "does not apply" in err


def test_tied_holders_meet_at_the_later_arrival_whichever_runs_first() -> None:
    """ZB-H1 on GPT-3 (tied embeddings): the last stage's rank reaches the meeting first in the loop but
    arrives later in time; the first rank must wait for it (found by tests/test_sweep_exhaustive.py)."""
    data = json.loads((REPO / "tests" / "data" / "sweep" / "gpt3-175b-512-a100-40gb.json").read_text())
    base = _base_for(parse_scenario(data["scenario"]).scenario, data["gpus"])
    s = Plan(4, 32, 4, 1, "ZeroBubble", 1, "selective", True, 1).apply(base)
    assert s.model.tie_word_embeddings
    assert check(s)
