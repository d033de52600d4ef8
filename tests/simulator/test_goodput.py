"""simulator/goodput.py: checkpoint size, Young's interval, goodput under failures, the run's cost.

The ideal-case identities are checked exactly; `simulate --json` is checked through the CLI.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.simulator.costs.params import count_parameters
from plancast.simulator.goodput import (
    JOULES_PER_MWH,
    SECONDS_PER_HOUR,
    checkpoint,
    goodput_fraction,
    job_mtbf_s,
    plan_run,
    young_interval_s,
)
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from tests.cli_runner import REPO, cli_main

GPT3 = REPO / "examples" / "gpt3-175b-dgx-a100.toml"
TINY = REPO / "examples" / "tiny-local-cpu.toml"


def scenario(nodes: int = 4, **training: Any) -> Scenario:
    """GPT-3 1.3B on DGX A100 nodes, tp 2 x pp 2, the rest data parallel."""
    return parse_scenario(
        {
            "model": {"preset": "gpt3-1.3b"},
            "training": {"seq_len": 2048, "global_batch_size": 8192, "dtype": "bf16", **training},
            "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2},
            "cluster": {"preset": "dgx-a100-80gb", "num_nodes": nodes},
        }
    ).scenario


@pytest.mark.parametrize(
    ("write_s", "mtbf_s"), [(1.0, 1.0), (30.0, 3600.0), (12.5, 50677.0 * 3600 / 16384), (0.25, 7.0e6)]
)
def test_young_interval_is_sqrt_2_c_m_exactly(write_s: float, mtbf_s: float) -> None:
    assert young_interval_s(write_s, mtbf_s) == math.sqrt(2.0 * write_s * mtbf_s)


def test_plan_uses_young_interval_of_its_checkpoint_and_mtbf() -> None:
    s = scenario(total_tokens=300e9)
    g = plan_run(s, 2.0)
    assert g is not None
    ckpt = checkpoint(s)
    assert g["checkpoint_interval_s"] == math.sqrt(2.0 * ckpt.write_s * job_mtbf_s(s))
    assert g["checkpoint_interval_source"] == "young"
    assert job_mtbf_s(s) == s.cluster.gpu.mtbf_hours * 3600 / 32


def test_young_interval_is_the_first_order_optimum() -> None:
    write_s, restart_s, mtbf_s = 60.0, 600.0, 6 * 3600.0
    best = young_interval_s(write_s, mtbf_s)
    at_best = goodput_fraction(best, write_s, restart_s, mtbf_s)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert goodput_fraction(best * factor, write_s, restart_s, mtbf_s) < at_best


def test_goodput_without_failures_is_the_checkpoint_overhead_only() -> None:
    assert goodput_fraction(100.0, 25.0, 600.0, math.inf) == 100.0 / 125.0
    assert goodput_fraction(100.0, 0.0, 0.0, math.inf) == 1.0
    assert goodput_fraction(3600.0, 600.0, 3600.0, 1800.0) == 0.0  # failures outpace checkpoints


def test_checkpoint_bytes_count_parameters_and_adam_state() -> None:
    """bf16 mixed precision: 2 bytes of weights + 12 of fp32 master, momentum and variance; with tied
    embeddings over two pipeline stages the last stage's output copy is a tensor of its own."""
    s = scenario()
    m = s.model
    expected = (count_parameters(m) + m.vocab_size * m.hidden_size) * 14
    assert checkpoint(s).total_bytes == expected
    fp32 = scenario(dtype="fp32")
    assert checkpoint(fp32).total_bytes == expected / 14 * 12
    ckpt = checkpoint(s)
    assert ckpt.write_s == expected / 4 / (s.cluster.checkpoint_bandwidth_GBps * 1e9)


def test_run_totals_follow_from_wall_time() -> None:
    s = scenario(total_tokens=100e9)
    g = plan_run(s, 3.0)
    assert g is not None
    wall_s = g["time_to_train_days"] * 86400
    useful_s = 100e9 / (8192 * 2048) * 3.0
    assert wall_s == pytest.approx(useful_s / g["goodput_fraction"], rel=1e-12)
    assert g["gpu_hours"] == pytest.approx(32 * wall_s / SECONDS_PER_HOUR, rel=1e-12)
    assert g["cost_usd"] == pytest.approx(g["gpu_hours"] * 1.49, rel=1e-12)
    assert g["energy_MWh"] == pytest.approx(32 * 400.0 * wall_s * 1.1 / JOULES_PER_MWH, rel=1e-12)


def test_fixed_checkpoint_every_steps_sets_the_interval() -> None:
    g = plan_run(scenario(total_tokens=1e9, checkpoint_every_steps=50), 2.0)
    assert g is not None
    assert g["checkpoint_interval_s"] == 100.0
    assert g["checkpoint_interval_source"] == "training.checkpoint_every_steps"


def test_no_total_tokens_no_goodput() -> None:
    assert plan_run(scenario(), 2.0) is None


def test_goodput_falls_as_gpus_grow_at_fixed_per_gpu_failure_rate() -> None:
    fractions = []
    for nodes in (64, 128, 256, 1024):
        g = plan_run(scenario(nodes=nodes, total_tokens=1e12), 1.0)
        assert g is not None
        fractions.append(g["goodput_fraction"])
    assert fractions == sorted(fractions, reverse=True)
    assert len(set(fractions)) == len(fractions)


# ------------------------------------------------------------------------------------------- CLI
def write_gpt3(tmp_path: Path, nodes: int, **training: Any) -> Path:
    data = tomllib.loads(GPT3.read_text())
    data["training"].update(training)
    data["cluster"]["num_nodes"] = nodes
    path = tmp_path / f"gpt3-{nodes}-{len(training)}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def simulate_json(path: Path) -> dict[str, Any]:
    code, stdout, stderr = cli_main("simulate", str(path), "--json")
    assert code == 0, stderr
    result: dict[str, Any] = json.loads(stdout)
    return result


def test_cli_simulate_json_has_goodput_and_it_falls_with_scale(tmp_path: Path) -> None:
    """GPT-3 175B for 300B tokens (Brown et al. 2020) on 96, 192 and 384 DGX A100 nodes."""
    runs = [simulate_json(write_gpt3(tmp_path, n, total_tokens=300e9)) for n in (96, 192, 384)]
    keys = {"checkpoint_bytes", "checkpoint_interval_s", "goodput_fraction", "time_to_train_days"}
    keys |= {"gpu_hours", "cost_usd", "energy_MWh"}
    for r in runs:
        assert keys <= set(r["goodput"])
        assert all(r["goodput"][k] is not None for k in keys)
    # 175B x (2 + 12) bytes, plus the last stage's copy of the tied embedding
    assert runs[0]["goodput"]["checkpoint_bytes"] == pytest.approx(175e9 * 14, rel=0.02)
    fractions = [r["goodput"]["goodput_fraction"] for r in runs]
    assert fractions[0] > fractions[1] > fractions[2]


def test_cli_simulate_without_total_tokens_is_unchanged(tmp_path: Path) -> None:
    plain = simulate_json(GPT3)
    planned = simulate_json(write_gpt3(tmp_path, 192, total_tokens=300e9))
    assert "goodput" not in plain
    assert {k: v for k, v in planned.items() if k != "goodput"} == plain


def test_cli_simulate_table_shows_the_run(tmp_path: Path) -> None:
    code, stdout, stderr = cli_main("simulate", str(write_gpt3(tmp_path, 192, total_tokens=300e9)))
    assert code == 0, stderr
    assert "goodput" in stdout and "time to train" in stdout and "cost USD" in stdout
    code, stdout, _ = cli_main("simulate", str(GPT3))
    assert code == 0 and "goodput" not in stdout


def test_cli_rejects_a_negative_total_tokens(tmp_path: Path) -> None:
    code, _, stderr = cli_main("simulate", str(write_gpt3(tmp_path, 192, total_tokens=-1.0)))
    assert code == 2
    assert "training.total_tokens" in stderr


def test_cli_simulate_out_writes_the_checkpoint_prediction(tmp_path: Path) -> None:
    """compare reconciles a checkpointed run against predicted/summary.json's `checkpoint`."""
    code, _, stderr = cli_main("simulate", str(TINY), "--out", str(tmp_path / "run"))
    assert code == 0, stderr
    written = json.loads((tmp_path / "run" / "predicted" / "summary.json").read_text())
    s = parse_scenario(tomllib.loads(TINY.read_text())).scenario
    assert written["checkpoint"] == {
        "bytes": checkpoint(s).total_bytes,
        "bytes_per_rank": checkpoint(s).per_rank_bytes,
        "write_s": checkpoint(s).write_s,
        "read_s": checkpoint(s).read_s,
    }


def test_measured_power_replaces_the_catalog_tdp() -> None:
    s = scenario(total_tokens=100e9)
    catalog, measured = plan_run(s, 3.0), plan_run(s, 3.0, power_W=250.0)
    assert catalog is not None and measured is not None
    assert (catalog["power_source"], measured["power_source"]) == ("catalog", "telemetry")
    assert measured["energy_MWh"] == pytest.approx(catalog["energy_MWh"] * 250.0 / 400.0, rel=1e-12)
    assert measured["cost_usd"] == catalog["cost_usd"]


def test_each_failure_loses_half_a_segment_and_the_restart() -> None:
    s = scenario(total_tokens=1e11, checkpoint_every_steps=100)
    g = plan_run(s, 2.0)
    assert g is not None
    ckpt = checkpoint(s)
    assert g["lost_per_failure_s"] == (200.0 + ckpt.write_s) / 2 + s.cluster.restart_overhead_s + ckpt.read_s
    mtbf_s = job_mtbf_s(s)
    assert g["goodput_fraction"] == 200.0 / (200.0 + ckpt.write_s) * (1 - g["lost_per_failure_s"] / mtbf_s)
