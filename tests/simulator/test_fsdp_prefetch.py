"""parallelism.fsdp_backward_prefetch: FSDP2 (and FSDP1 BACKWARD_PRE) issue the next unit's all-gather as
the current unit's gradient computation starts; FSDP1 BACKWARD_POST (Composer's default) only once it is
done, so every backward unit waits for its own gather."""

from __future__ import annotations

import pytest

from plancast.simulator.predict import simulate
from tests.simulator.test_fsdp_mixed_precision import llama8b_fsdp
from tests.simulator.test_overlap_slowdown import with_slowdown


def test_the_default_prefetches_one_unit_ahead() -> None:
    assert llama8b_fsdp().parallelism.fsdp_backward_prefetch == "pre"


def test_post_prefetch_exposes_the_backward_gathers_as_communication() -> None:
    """Without the slowdown of compute beside collectives the compute is the same; with it, "post"
    overlaps less, so its compute is no longer (tests/simulator/test_overlap_slowdown.py)."""
    pre = simulate(with_slowdown(llama8b_fsdp(), 0.0), events=False).summary
    post = simulate(with_slowdown(llama8b_fsdp(fsdp_backward_prefetch="post"), 0.0), events=False).summary
    assert post["compute_time_s"] == pytest.approx(pre["compute_time_s"], rel=1e-9)
    assert post["exposed_comm_s"]["dp"] > pre["exposed_comm_s"]["dp"]
    assert post["step_time_s"] > pre["step_time_s"]


def test_without_parameter_prefetch_the_setting_changes_nothing() -> None:
    """overlap_param_gather off already gathers each unit when it is reached, in both passes."""
    off = simulate(llama8b_fsdp(overlap_param_gather=False), events=False).summary
    post = simulate(llama8b_fsdp(overlap_param_gather=False, fsdp_backward_prefetch="post"), events=False)
    assert post.summary["step_time_s"] == off["step_time_s"]
