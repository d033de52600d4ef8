"""simulator/cluster_search.py and `plancast sweep --gpus A,B --cluster X,Y --rank-by ...`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.simulator.cluster_search import pareto_front, search, with_cluster
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main

BASE: dict[str, Any] = {
    "model": {"preset": "gpt3-350m"},
    "training": {"seq_len": 1024, "global_batch_size": 64, "dtype": "bf16", "total_tokens": 30e9},
    "cluster": {"preset": "dgx-a100-80gb", "checkpoint_bandwidth_GBps": 2.0},
}


def base(**training: Any) -> Scenario:
    data = {**BASE, "training": {**BASE["training"], **training}}
    return parse_scenario(data).scenario


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ([(1, 5), (2, 4), (3, 3)], [0, 1, 2]),  # a trade-off curve: all on the front
        ([(1, 5), (2, 6), (3, 3)], [0, 2]),  # (2, 6) is beaten by (1, 5)
        ([(1, 1), (2, 2), (3, 3)], [0]),  # one plan beats all
        ([(2, 2), (1, None)], [0]),  # plans without a cost are left out
        ([(2, 2), (1, float("nan"))], [0]),
        ([(1, 1), (1, 1), (2, 0)], [0, 2]),  # identical points kept once
    ],
)
def test_pareto_front(points: list[tuple[float, float | None]], front: list[int]) -> None:
    rows = [{"days": x, "usd": y} for x, y in points]
    assert pareto_front(rows, "days", "usd") == front


def test_with_cluster_keeps_the_site_settings() -> None:
    s = with_cluster(base(), "dgx-h100-80gb")
    assert s.cluster.gpu.name == "H100-SXM5-80GB"
    assert s.cluster.checkpoint_bandwidth_GBps == 2.0
    assert s.cluster.gpu.price_usd_per_hour == 2.99


def test_search_ranks_every_cluster_and_size_by_cost() -> None:
    seen: list[tuple[int, int, str]] = []
    result = search(
        base(),
        [16, 32],
        ["dgx-a100-80gb", "dgx-h100-80gb"],
        rank_by="cost",
        finalists=2,
        progress=lambda done, total, label: seen.append((done, total, label)),
    )
    assert {(r["cluster"], r["gpus"]) for r in result.rows} == {
        (c, n) for c in ("dgx-a100-80gb", "dgx-h100-80gb") for n in (16, 32)
    }
    costs = [r["cost_usd"] for r in result.rows]
    assert costs == sorted(costs)
    assert seen[0] == (0, 4, "dgx-a100-80gb x 16") and seen[-1] == (4, 4, "ranking")
    front = [r for r in result.rows if r["pareto"]]
    assert result.rows[0]["pareto"] and front
    fastest = min(result.rows, key=lambda r: r["time_to_train_days"])
    assert fastest["pareto"]


def test_search_by_cost_needs_total_tokens() -> None:
    with pytest.raises(ValueError, match=r"training\.total_tokens"):
        search(parse_scenario({**BASE, "training": {"seq_len": 1024}}).scenario, [8], [None], rank_by="cost")


# ------------------------------------------------------------------------------------------- CLI
def scenario_file(tmp_path: Path, **training: Any) -> Path:
    data = {**BASE, "training": {**BASE["training"], **training}}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def test_cli_sweep_across_sizes_and_clusters(tmp_path: Path) -> None:
    code, stdout, stderr = cli_main(
        "sweep",
        str(scenario_file(tmp_path)),
        "--gpus",
        "16,32",
        "--cluster",
        "dgx-a100-80gb,dgx-h100-80gb",
        "--rank-by",
        "energy",
        "--finalists",
        "1",
        "--json",
    )
    assert code == 0, stderr
    result = json.loads(stdout)
    assert result["rank_by"] == "energy"
    assert len(result["plans"]) == 4
    energy = [p["energy_MWh"] for p in result["plans"]]
    assert energy == sorted(energy)
    assert {p["gpu"] for p in result["plans"]} == {"A100-SXM4-80GB", "H100-SXM5-80GB"}
    assert result["pareto"]


def test_cli_sweep_table(tmp_path: Path) -> None:
    code, stdout, stderr = cli_main(
        "sweep",
        str(scenario_file(tmp_path)),
        "--gpus",
        "8,16",
        "--rank-by",
        "time-to-train",
        "--finalists",
        "1",
    )
    assert code == 0, stderr
    assert "ranked by time-to-train" in stdout and "Pareto" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "8,x"], "'x' is not a whole number"),
        (["--gpus", "8", "--cluster", "dgx-z100"], "unknown preset(s) dgx-z100"),
        (["--gpus", "8", "--rank-by", "speed"], "--rank-by speed: choose one of"),
    ],
)
def test_cli_sweep_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    code, _, stderr = cli_main("sweep", str(scenario_file(tmp_path)), *args)
    assert code == 2
    assert message in stderr
    assert "Traceback" not in stderr


def test_cli_sweep_by_cost_without_total_tokens(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps({**BASE, "training": {"seq_len": 1024, "global_batch_size": 8}}))
    code, _, stderr = cli_main("sweep", str(path), "--gpus", "8", "--rank-by", "cost")
    assert code == 2
    assert "set training.total_tokens" in stderr


def test_cli_sweep_one_size_keeps_the_step_ranking(tmp_path: Path) -> None:
    code, stdout, stderr = cli_main(
        "sweep", str(scenario_file(tmp_path)), "--gpus", "8", "--json", "--top", "3"
    )
    assert code == 0, stderr
    result = json.loads(stdout)
    assert set(result) == {
        "gpus", "framework", "runnable", "pins", "max_memory_gib",
        "plans_enumerated", "plans_fitting", "tp_degrees_not_grouped", "plans_simulated",
        "plans_refused_exact", "exact_top", "seconds", "plans",
    }  # fmt: skip
    steps = [p["step_time_s"] for p in result["plans"]]
    assert len(steps) == 3 and steps == sorted(steps)
