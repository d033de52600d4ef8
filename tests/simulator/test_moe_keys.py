"""Issue 31's MoE keys, each moving the prediction the way its mechanism says, and MoE parallel folding
(EP64 over TP2 x DP32 with etp 1) accepted as Megatron-Core accepts it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.mesh import RankGrid
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main

# A fine-grained MoE (64 experts of width 512, top-8) on 4 DGX H100 nodes, ep 32 over 4 nodes.
MOE: dict[str, Any] = {
    "model": {
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "vocab_size": 32000,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position_embedding": "rope",
        "num_local_experts": 64,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 512,
    },
    "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64, "dtype": "bf16"},
    "parallelism": {"expert_parallel_degree": 32, "framework": "megatron-lm"},
    "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 4},
}


def _scenario(section: str = "parallelism", **keys: Any) -> Scenario:
    return parse_scenario({**MOE, section: {**MOE[section], **keys}}, "moe-keys").scenario


def _summary(section: str = "parallelism", **keys: Any) -> dict[str, Any]:
    return simulate(_scenario(section, **keys), events=False).summary


def test_forced_balance_is_faster_and_a_larger_imbalance_slower() -> None:
    times = [_summary("training", moe_routing_imbalance=x)["step_time_s"] for x in (1.0, 1.25, 2.0)]
    assert times[0] < times[1] < times[2]


def test_deepep_crosses_the_scale_out_tier_once_per_node_so_its_all_to_alls_are_shorter() -> None:
    """k = 8 experts over 4 nodes touch ~2.7 remote nodes per token: DeepEP sends ~2.7 token copies over
    InfiniBand where NCCL's all-to-all sends 8 * 3/4 = 6."""
    exposed = {d: _summary(moe_token_dispatcher=d)["exposed_comm_s"]["ep"] for d in ("alltoall", "deepep")}
    assert exposed["deepep"] < 0.6 * exposed["alltoall"]
    assert _summary(moe_token_dispatcher="hybridep")["exposed_comm_s"]["ep"] == exposed["deepep"]


def test_allgather_moves_every_token_to_every_member_so_it_is_slower_at_large_ep() -> None:
    alltoall = _summary()["exposed_comm_s"]["ep"]
    assert _summary(moe_token_dispatcher="allgather")["exposed_comm_s"]["ep"] > alltoall


def test_overlapped_all_to_alls_shorten_the_step_and_stay_visible_as_overlapped_events() -> None:
    """The same transfers: what the pass waits for stays on "ep", the rest runs on "ep_overlap" beside
    compute, and the event breakdown (compare, dashboard) reads the same exposed time as `simulate`."""
    from plancast.traces.breakdown import rank_breakdown_us

    plain = simulate(_scenario())
    overlapped = simulate(_scenario(moe_overlap_ep_comm=True))
    assert overlapped.summary["step_time_s"] < plain.summary["step_time_s"]
    assert overlapped.summary["exposed_comm_s"]["ep"] < plain.summary["exposed_comm_s"]["ep"]
    ep, hidden = (overlapped.events[overlapped.events["stream"] == name] for name in ("ep", "ep_overlap"))
    plain_ep = plain.events[plain.events["stream"] == "ep"]
    assert len(ep) == len(plain_ep) > 0 and len(hidden) > 0
    assert set(ep["kind"]) == set(hidden["kind"]) == {"all_to_all"}
    assert ep["bytes"].sum() == plain_ep["bytes"].sum() and hidden["bytes"].sum() == 0
    assert ep["dur_us"].sum() + hidden["dur_us"].sum() == pytest.approx(plain_ep["dur_us"].sum(), rel=1e-6)
    events, summary = overlapped.events, overlapped.summary
    step = events[events["step"] == events["step"].min()]
    step_us = float((step["start_us"] + step["dur_us"]).max())
    row = (
        rank_breakdown_us(step, step_us, summary["overlapped_streams"])
        .set_index("rank")
        .loc[summary["critical_rank"]]
    )
    assert row["exposed_comm:ep"] / 1e6 == pytest.approx(summary["exposed_comm_s"]["ep"], rel=1e-6)
    assert row.get("exposed_comm:ep_overlap", 0.0) == pytest.approx(0.0, abs=1e-3)
    assert row["compute"] / 1e6 == pytest.approx(
        summary["compute_time_s"] + summary["optimizer_time_s"], rel=1e-6
    )


def test_grouped_gemm_prices_fine_grained_experts_above_separate_small_gemms() -> None:
    """The local experts run as one grouped GEMM: the MFU of a 64-expert model at ep 32 (2 experts a
    rank) and at ep 4 (16 experts a rank) stay close, not 8x apart in per-op overheads."""
    few, many = (_summary(expert_parallel_degree=ep)["mfu"] for ep in (32, 4))
    assert many > few * 0.8


FOLDED: dict[str, Any] = {
    "model": {"preset": "deepseek-v3"},
    "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 4096, "dtype": "bf16"},
    "parallelism": {
        "tensor_parallel_degree": 2,
        "pipeline_parallel_degree": 32,
        "sequence_parallel": True,
        "expert_parallel_degree": 64,
        "zero_stage": 1,
        "framework": "megatron-lm",
    },
    "cluster": {"preset": "hgx-h800", "num_nodes": 256},
}


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def test_ep64_over_tp2_dp32_is_refused_unfolded_and_accepted_with_etp_1(tmp_path: Path) -> None:
    code, _, err = cli_main("validate", str(_write(tmp_path, FOLDED)))
    assert code == 2 and "expert_tensor_parallel_degree" in err and "does not divide" in err
    folded = {**FOLDED, "parallelism": {**FOLDED["parallelism"], "expert_tensor_parallel_degree": 1}}
    s = load_scenario(_write(tmp_path, folded)).scenario
    assert (s.tp, s.dp, s.ep, s.etp, s.edp) == (2, 32, 64, 1, 1)
    assert s.grid.group("ep", 0) == tuple(range(64))  # both tp ranks of 32 dp replicas
    bad = {**FOLDED, "parallelism": {**FOLDED["parallelism"], "expert_tensor_parallel_degree": 4}}
    code, _, err = cli_main("validate", str(_write(tmp_path, bad)))
    assert code == 2 and "64 x 4 does not divide tp x cp x dp = 64" in err


@pytest.mark.parametrize(
    ("pp", "dp", "cp", "tp", "ep", "etp"), [(2, 4, 1, 2, 4, 2), (1, 8, 2, 2, 4, 1), (2, 2, 2, 4, 8, 2)]
)
def test_folded_expert_grid_partitions_each_stage(
    pp: int, dp: int, cp: int, tp: int, ep: int, etp: int
) -> None:
    """Megatron-Core's expert grid: stage-local rank = (edp_i * ep + ep_i) * etp + etp_i."""
    grid = RankGrid(pp, dp, tp, cp=cp, ep=ep, etp=etp)
    stage = dp * cp * tp
    for name in ("ep", "edp"):
        groups = grid.groups(name)
        assert sorted(r for g in groups for r in g) == list(range(grid.world_size))
        assert all(len({r // stage for r in g}) == 1 for g in groups)  # inside one pipeline stage
    assert grid.size("edp") == stage // (ep * etp)
    assert grid.group("ep", 0) == tuple(j * etp for j in range(ep))
    if etp == tp and cp == 1:
        assert grid.groups("ep") == RankGrid(pp, dp, tp, ep=ep).groups("ep")  # the unfolded layout


def test_contiguous_experts_reach_fewer_ranks_and_nodes_so_deepep_sends_less() -> None:
    """AutoModel's fake balanced gate sends token i to experts 8i .. 8i+7: with 2 experts a rank that is
    4 ranks of one node, against ~2.7 remote nodes and ~7.5 remote ranks for independent picks."""
    exposed = {
        spread: simulate(
            parse_scenario(
                {
                    **MOE,
                    "training": {**MOE["training"], "moe_token_spread": spread},
                    "parallelism": {**MOE["parallelism"], "moe_token_dispatcher": "deepep"},
                },
                "spread",
            ).scenario,
            events=False,
        ).summary["exposed_comm_s"]["ep"]
        for spread in ("independent", "contiguous")
    }
    assert exposed["contiguous"] < 0.5 * exposed["independent"]
    # NCCL's all-to-all sends every (token, expert) copy wherever the experts lie
    plain = {
        s: _summary("training", moe_token_spread=s)["exposed_comm_s"]["ep"]
        for s in ("independent", "contiguous")
    }
    assert plain["independent"] == plain["contiguous"]


@pytest.mark.parametrize(
    ("spread", "k", "experts", "units", "expected"),
    [
        ("contiguous", 8, 256, 8, 7 / 8),  # one node of 32 experts, the token's own 1 time in 8
        ("contiguous", 8, 256, 64, 2 * 63 / 64),  # two ranks of 4 experts
        ("independent", 1, 64, 4, 3 / 4),
        ("independent", 2, 4, 2, 1 - 0.5 * (1 / 3)),  # both picks on the other unit, or one of them
    ],
)
def test_remote_units(spread: str, k: int, experts: int, units: int, expected: float) -> None:
    from plancast.simulator.costs.moe_dispatch import remote_units

    assert remote_units(spread, k, experts, units) == pytest.approx(expected)  # type: ignore[arg-type]


def test_folding_etp_1_holds_whole_experts_and_dispatches_its_share_of_the_tp_tokens() -> None:
    """tp 2, ep 2 either way: unfolded, both tp ranks dispatch all tokens to half-width experts; folded
    (etp 1, sequence parallel) each dispatches half the tokens to whole experts: the same expert FLOPs,
    half the all-to-all bytes, twice the expert parameters per rank."""
    from plancast.simulator.costs.memory import rank_memory
    from plancast.simulator.costs.moe import all_to_all_bytes
    from plancast.simulator.costs.stage import stage_costs
    from plancast.simulator.engine import Topology

    base = {"tensor_parallel_degree": 2, "sequence_parallel": True, "expert_parallel_degree": 2}
    unfolded, folded = (_scenario(**base, **extra) for extra in ({}, {"expert_tensor_parallel_degree": 1}))
    assert (unfolded.edp, folded.edp) == (8, 16)  # dp 16 / ep 2; 32 ranks / (ep 2 x etp 1)
    assert all_to_all_bytes(folded) * 2 == all_to_all_bytes(unfolded)
    assert rank_memory(folded, 0).parameters > rank_memory(unfolded, 0).parameters
    flops = [stage_costs(s, Topology.of(s).levels("tp"))[0].forward_flops for s in (unfolded, folded)]
    assert flops[1] == pytest.approx(flops[0], rel=0.02)  # up to the experts' tile padding


@pytest.mark.parametrize(
    ("section", "keys", "warning"),
    [
        (
            "parallelism",
            {"expert_parallel_degree": 1, "moe_token_dispatcher": "deepep"},
            "moe_token_dispatcher is",
        ),
        ("parallelism", {"expert_parallel_degree": 1, "moe_overlap_ep_comm": True}, "moe_overlap_ep_comm is"),
        ("training", {"moe_routing_imbalance": 1.0}, "moe_routing_imbalance is ignored"),
    ],
)
def test_ep_keys_with_nothing_to_act_on_warn(
    tmp_path: Path, section: str, keys: dict[str, Any], warning: str
) -> None:
    data = {**MOE, section: {**MOE[section], **keys}}
    if section == "training":
        data["model"] = {**MOE["model"], "moe_capacity_factor": 1.25}
    code, _, err = cli_main("validate", str(_write(tmp_path, data)))
    assert code == 0, err
    assert warning in err


def test_folded_moe_on_sequence_shards_drops_the_blocks_tp_gathers_and_sums_the_router_gradient() -> None:
    """tp 2 with sequence parallel, ep 2 over the tp pair (etp 1): each MoE block keeps the attention's
    all-gather and reduce-scatter only, and the step's sequence-parallel all-reduce carries the norms'
    and the routers' gradients (as plancast run does, tests/distributed/test_moe_cp.py)."""
    from plancast.simulator.costs.tp_comm import sp_grad_all_reduce_bytes

    par = {"tensor_parallel_degree": 2, "sequence_parallel": True, "expert_parallel_degree": 2}
    events = {
        etp: simulate(_scenario(**par, **({"expert_tensor_parallel_degree": etp} if etp else {}))).events
        for etp in (None, 1)
    }
    tp = {
        etp: ev[(ev["stream"] == "tp") & (ev["rank"] == 0) & (ev["step"] == ev["step"].min())]
        for etp, ev in events.items()
    }
    layers, microbatches = 4, 64 // (1 * 16)
    gathers = {etp: int((t["kind"] == "all_gather").sum()) for etp, t in tp.items()}
    assert gathers[None] - gathers[1] == layers * microbatches * 2  # the MoE's gather, forward and backward
    sp = tp[1][tp[1]["kind"] == "all_reduce"]["bytes"].max()
    assert sp == sp_grad_all_reduce_bytes(layers, 1024, layernorm=False) + layers * 1024 * 64 * 4


def test_overlap_hides_each_all_to_all_behind_its_own_window_of_the_other_pass() -> None:
    """Megatron-Core's combined 1F1B (model_chunk_schedule_plan.py): the forward's dispatch beside the
    experts' input gradients, its combine beside the attention's backward; the backward's combine-grad
    beside the attention's forward, its dispatch-grad beside the experts' weight gradients and forward.
    1 s transfers: a 3 s window hides one (it pays only the SMs it holds, f), a 0.25 s window 0.25 s."""
    from plancast.simulator.costs.moe_cp_comm import InnerCollective
    from plancast.simulator.costs.moe_dispatch import OVERLAP_SM_FRACTION
    from plancast.simulator.costs.moe_overlap import Windows
    from plancast.simulator.costs.stage import ep_overlapped

    a2a = InnerCollective("ep", "all_to_all", 1, 1.0)
    # attention forward 0.25 s, backward 3 s; experts forward 0.5 s, input grads 3 s, weight grads 0.25 s
    windows = Windows(0.25, 3.0, 0.5, 3.0, 0.25)
    fwd, bwd = ep_overlapped(((a2a, a2a), (a2a, a2a)), windows)
    f = OVERLAP_SM_FRACTION
    assert [c.blocking_s for c in fwd] == pytest.approx([f, f])
    assert [c.blocking_s for c in bwd] == pytest.approx([0.75, 0.25])  # 0.25 s and 0.75 s windows
    assert all(c.seconds == 1.0 for c in (*fwd, *bwd))  # the transfers themselves are unchanged
    # the same compute as one pool per pass (the earlier model) would have hidden the backward's too
    assert sum(c.blocking_s for c in bwd) > 2 * f
    plain = ep_overlapped(((a2a, a2a), (a2a, a2a)), None)
    assert [c.blocking_s for phase in plain for c in phase] == [1.0] * 4


def test_the_windows_split_a_block_into_attention_and_experts() -> None:
    from plancast.simulator.costs.moe import moe_layer_forward
    from plancast.simulator.costs.moe_overlap import Windows
    from plancast.simulator.costs.ops import Shape

    s = _scenario(expert_parallel_degree=2)
    ops = moe_layer_forward(Shape.of(s), s.model, s.ep)
    w = Windows.of(ops, lambda part: (float(len(part)), 10.0 * len(part), 100.0 * len(part)))
    experts = sum(op.name.startswith(("expert_", "shared_")) for op in ops)
    pre = len(ops) - experts - 2  # unpermute and the residual add follow the combine
    assert w == Windows(pre, 110.0 * pre, experts, 10.0 * experts, 100.0 * experts)
