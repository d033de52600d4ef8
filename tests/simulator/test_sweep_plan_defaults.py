"""A plan the sweep derives from a scenario is priced as the plan written as a scenario of its own: the
keys whose framework default depends on the plan (ZeRO stage, dp: catalog/frameworks.PLAN_DEPENDENT)
and that the scenario left unset take the plan's default (sweep_axes.Plan.apply); a key the scenario
sets holds for every plan; and the sweep's bounds, which read those keys per plan
(sweep_estimate.Estimator.dp_keys), stay below the engine's step time."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.catalog.frameworks import framework_defaults
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import _base_for
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_space import enumerate_plans
from tests.simulator.test_sweep_bound import assert_bounds_hold, every_nth

FRAMEWORKS = ("megatron-lm", "deepspeed", "torchtitan")


def base(framework: str, zero_stage: int, gpus: int = 8, **parallelism: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 64, "global_batch_size": 16, "dtype": "bf16"},
        "parallelism": {"framework": framework, "zero_stage": zero_stage, **parallelism},
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 1},
    }
    return _base_for(parse_scenario(data).scenario, gpus)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_plan_takes_its_frameworks_defaults_for_its_own_stage_and_dp(framework: str) -> None:
    s = base(framework, 1)
    assert {"overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_cap_MiB"} <= s.derived_keys
    seen, est = set(), Estimator(s, 8)
    for plan in enumerate_plans(s, 8):
        par = plan.apply(s).parallelism
        assert est.dp_keys(plan) == (par.overlap_grad_reduce, par.overlap_param_gather, par.bucket_cap_MiB)
        own = framework_defaults(framework, dtype="bf16", dp=plan.dp, zero_stage=plan.zero_stage)
        assert par.overlap_param_gather is own["overlap_param_gather"], plan.label()
        assert par.overlap_grad_reduce is own["overlap_grad_reduce"], plan.label()
        bucket = own["ddp_bucket_params"]
        want = None if bucket is None else bucket * 4 / 2**20  # bf16: fp32 gradient accumulation
        assert par.ddp_bucket_cap_MiB == want, plan.label()
        assert plan.apply(s).derived_keys == s.derived_keys  # still the framework's, for the next plan
        seen.add((plan.zero_stage, par.overlap_param_gather))
    assert {(1, False), (2, True), (3, True)} <= seen


def test_a_key_the_scenario_sets_holds_for_every_plan() -> None:
    s = base("megatron-lm", 1, overlap_param_gather=False, ddp_bucket_cap_MiB=25.0)
    assert "overlap_param_gather" not in s.derived_keys and "ddp_bucket_cap_MiB" not in s.derived_keys
    plans = list(enumerate_plans(s, 8))
    assert {p.zero_stage for p in plans} == {0, 1, 2, 3}
    for plan in plans:
        par = plan.apply(s).parallelism
        assert par.overlap_param_gather is False and par.ddp_bucket_cap_MiB == 25.0


@pytest.mark.parametrize("framework", ["megatron-lm", "deepspeed"])
def test_the_bounds_hold_where_a_plan_takes_other_defaults_than_its_scenario(framework: str) -> None:
    """ZeRO 2-3 plans of a ZeRO-0 scenario: gathers overlapped (and DeepSpeed's ZeRO-3 reduce-scatters)
    where the scenario's own stage has neither."""
    s = base(framework, 0)
    plans = [p for p in sorted(enumerate_plans(s, 8)) if p.zero_stage >= 2 and p.dp > 1]
    assert any(p.apply(s).parallelism.overlap_param_gather for p in plans)
    assert not s.parallelism.overlap_param_gather
    assert assert_bounds_hold(s, 8, every_nth(plans, 40)) > 20
