"""Keys a scenario sets over its cluster preset hold: a partial [cluster.compute] table keeps the preset's
other compute keys (as a partial [cluster.gpu] table does), and `sweep --cluster` on the scenario's own
preset searches, prints and saves the cluster the file describes; other presets say what they leave out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tomli_w

from plancast.simulator.cluster import Cluster
from plancast.simulator.cluster_search import own_cluster_keys
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.predict import simulate
from tests.cli_runner import cli_main

SCENARIO: dict[str, Any] = {
    "model": {"preset": "llama3-8b", "num_hidden_layers": 4},
    "training": {"seq_len": 4096, "global_batch_size": 16, "micro_batch_size": 1},
    "parallelism": {"framework": "megatron-lm"},
    "cluster": {"preset": "dgx-h100-80gb", "compute": {"matmul_efficiency": 0.5}},
}


def test_a_partial_compute_table_keeps_the_presets_other_compute_keys() -> None:
    """`matmul_efficiency = 0.5` over dgx-h100-80gb changes that key only: the Hopper preset's attention
    rates stay (they fell back to the A100 defaults when the table replaced the preset's whole)."""
    hopper = Cluster.model_validate({"preset": "dgx-h100-80gb"}).compute
    mine = Cluster.model_validate(SCENARIO["cluster"]).compute
    assert mine.matmul_efficiency == 0.5 != hopper.matmul_efficiency
    assert mine.model_copy(update={"matmul_efficiency": hopper.matmul_efficiency}) == hopper
    assert (
        hopper.attention_efficiency
        != Cluster.model_validate({"preset": "dgx-a100-80gb"}).compute.attention_efficiency
    )
    # the whole compute table written out, as a calibrated profile writes it, predicts the same
    full = {**SCENARIO, "cluster": {"preset": "dgx-h100-80gb", "compute": mine.model_dump(exclude_none=True)}}
    short = parse_scenario(SCENARIO).scenario
    assert (
        simulate(parse_scenario(full).scenario).summary["step_time_s"]
        == simulate(short).summary["step_time_s"]
    )
    assert own_cluster_keys(short, "dgx-h100-80gb") == ["cluster.compute.matmul_efficiency"]
    assert (
        own_cluster_keys(parse_scenario({**SCENARIO, "cluster": {"preset": "hgx-h200"}}).scenario, "hgx-h200")
        == []
    )


def _sweep(path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    code, stdout, stderr = cli_main("sweep", str(path), "--gpus", "8", "--top", "1", "--json", *args)
    return code, (json.loads(stdout) if code == 0 else {}), stderr


def test_sweep_on_the_scenarios_own_preset_keeps_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(tomli_w.dumps(SCENARIO))
    code, plain, _ = _sweep(path)
    assert code == 0
    code, own, stderr = _sweep(path, "--cluster", "dgx-h100-80gb", "--save-best", str(tmp_path / "best.toml"))
    assert code == 0, stderr
    best = own["plans"][0]
    assert best["step_time_s"] == plain["plans"][0]["step_time_s"]  # the file's cluster, not the catalog's
    assert "uses its catalog values" not in stderr  # nothing left out
    saved = load_scenario(tmp_path / "best.toml").scenario
    assert saved.cluster.compute.matmul_efficiency == 0.5
    assert abs(simulate(saved).summary["step_time_s"] - best["step_time_s"]) < 1e-9


def test_sweep_on_other_presets_names_the_keys_they_leave_out(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(tomli_w.dumps(SCENARIO))
    code, both, stderr = _sweep(path, "--cluster", "dgx-h100-80gb,dgx-b200", "--top", "20")
    assert code == 0, stderr
    assert (
        "the scenario sets cluster.compute.matmul_efficiency over its cluster preset dgx-h100-80gb: they "
        "describe that cluster and hold there; dgx-b200 uses its catalog values"
    ) in stderr
    code, plain, _ = _sweep(path)
    own_rows = [r for r in both["plans"] if r["cluster"] == "dgx-h100-80gb"]
    assert own_rows and own_rows[0]["step_time_s"] == plain["plans"][0]["step_time_s"]


def test_a_measured_local_cpu_scenario_is_named_as_measured_not_as_keys_set_by_hand(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """`sweep --cluster` over a local-cpu scenario this machine measured: the values that differ from the
    preset came from the microbenchmarks, not from the file, and the line says so (it listed 23 of them
    as keys "the scenario sets over its cluster preset"). The measurement is read from the cache, as a
    second command reads it; nothing is measured here."""
    from plancast.runtime.local_profile import record_path
    from tests.simulator.test_microbench_profile import record, scenario

    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
        "cluster": {"preset": "local-cpu", "gpus_per_node": 2},
    }
    assert parse_scenario(data).scenario == scenario()  # the shape the record is cached for
    monkeypatch.setenv("PLANCAST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PLANCAST_LOCAL_CPU", raising=False)  # measured, as outside the tests
    cached = record_path(scenario())
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(record()))
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))

    code, _, stderr = cli_main("sweep", str(path), "--cluster", "local-cpu,dgx-h100-80gb", "--top", "1")

    assert code == 0, stderr
    assert "measured this machine" not in stderr  # read from the cache
    assert "the scenario's cluster is local-cpu as measured on this machine" in stderr
    assert "dgx-h100-80gb uses its catalog values" in stderr and "the scenario sets" not in stderr
