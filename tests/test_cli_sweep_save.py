"""`plancast sweep --save-best PATH`: the best plan as a scenario file that `simulate` predicts at the
very step time the sweep ranked it by, the user's own keys and presets kept; never over a file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from plancast.commands.calibrate import wants_measuring
from plancast.simulator.loader import load_scenario, plan_tables
from plancast.simulator.predict import simulate
from plancast.simulator.sweep import planned_scenario
from plancast.simulator.sweep_axes import Plan
from tests.cli_runner import cli_main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TINY = EXAMPLES / "tiny-local-cpu.toml"
GPT3 = EXAMPLES / "gpt3-175b-dgx-a100.toml"


def _saved(tmp_path: Path, scenario: Path, *args: str) -> tuple[dict[str, object], Path, str]:
    path = tmp_path / "best.toml"
    code, out, err = cli_main(
        "sweep", str(scenario), *args, "--json", "--workers=1", "--save-best", str(path)
    )
    assert code == 0, err
    assert f"wrote {path}" in err
    best: dict[str, object] = json.loads(out)["plans"][0]
    return best, path, err


def _step_s(path: Path) -> float:
    code, out, err = cli_main("simulate", str(path), "--json")
    assert code == 0, err
    return float(json.loads(out)["step_time_s"])


def test_the_saved_best_plan_simulates_at_its_ranked_time_with_the_users_keys(tmp_path: Path) -> None:
    best, path, err = _saved(tmp_path, TINY, "--gpus", "4", "--top", "2")
    text = path.read_text()
    assert text.startswith("# written by plancast sweep --save-best from tiny-local-cpu.toml")
    assert str(best["plan"]) in text.splitlines()[1]
    tables = tomllib.loads(text)
    assert tables["model"] == {"preset": "tiny-gpt"}  # untouched, a preset still
    assert tables["training"]["steps"] == 20
    # the sweep priced with the local-cpu values it had: spelled out, so that `simulate` does not measure
    # this machine again for the plan's own shape (tests run with PLANCAST_LOCAL_CPU=shipped)
    assert "compute" in tables["cluster"] and not wants_measuring(path)
    assert "local-cpu cluster spelled out" in err
    assert tables["parallelism"]["pipeline_parallel_degree"] == best["pp"]
    assert abs(_step_s(path) - float(best["step_time_s"])) <= 1e-9 * float(best["step_time_s"])


def test_a_moe_plan_saved_with_its_expert_axes(tmp_path: Path) -> None:
    scenario = tmp_path / "moe.toml"
    scenario.write_text(
        '[model]\npreset = "tiny-moe"\n[training]\nseq_len = 64\nglobal_batch_size = 32\n'
        '[parallelism]\nframework = "megatron-lm"\n[cluster]\npreset = "dgx-a100-80gb"\nnum_nodes = 1\n'
    )
    best, path, _ = _saved(tmp_path, scenario, "--gpus", "8", "--top", "1", "--pin", "ep=2", "--pin", "pp=2")
    tables = tomllib.loads(path.read_text())
    assert tables["parallelism"]["expert_parallel_degree"] == 2 and tables["model"] == {"preset": "tiny-moe"}
    assert tables["parallelism"].get("moe_token_dispatcher", "alltoall") == best["dispatcher"]
    assert abs(_step_s(path) - float(best["step_time_s"])) <= 1e-9 * float(best["step_time_s"])


def test_a_default_the_loader_derives_from_the_plan_is_left_to_it() -> None:
    """Megatron-LM's DDP bucket is max(40M, 1M x dp) parameters: a dp 48 plan of GPT-3 (dp 24 in the
    file) is priced with 48M-parameter buckets, as when written as its own scenario, so the saved
    tables leave the key to the loader, which derives the same."""
    s = load_scenario(GPT3).scenario
    plan = Plan(2, 16, 48, 1, "Interleaved1F1B", 2, "selective", True, 1)
    planned = planned_scenario(s, 1536, plan)
    assert s.parallelism.ddp_bucket_cap_MiB == 40e6 * 2 / 2**20  # fp16 gradients
    assert planned.parallelism.ddp_bucket_cap_MiB == 48e6 * 2 / 2**20
    tables, kept = plan_tables(tomllib.loads(GPT3.read_text()), planned, str(GPT3))
    assert kept and tables["parallelism"]["data_parallel_degree"] == 48
    assert "ddp_bucket_cap_MiB" not in tables["parallelism"]
    assert tables["model"]["preset"] == "gpt3-175b" and "tiers" in tables["cluster"]  # the file's own
    from plancast.simulator.loader import parse_scenario, resolve

    loaded = parse_scenario(tables).scenario
    assert loaded == resolve(planned)
    assert simulate(loaded, events=False).summary == simulate(planned, events=False).summary


def test_over_several_sizes_the_first_plan_of_the_ranking_is_saved_at_its_size(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(
        '[model]\npreset = "tiny-gpt"\n[training]\nseq_len = 64\nglobal_batch_size = 32\n'
        '[cluster]\npreset = "dgx-a100-80gb"\nnum_nodes = 1\n'
    )
    best, path, _ = _saved(tmp_path, scenario, "--gpus", "4,16", "--top", "1")
    tables = tomllib.loads(path.read_text())
    assert f"on {best['gpus']} GPUs" in path.read_text().splitlines()[1]
    assert tables["cluster"]["preset"] == "dgx-a100-80gb"
    assert load_scenario(path).scenario.world_size == best["gpus"]
    assert abs(_step_s(path) - float(best["step_time_s"])) <= 1e-9 * float(best["step_time_s"])


def test_over_several_clusters_the_first_plan_is_saved_on_its_preset(tmp_path: Path) -> None:
    """--cluster searches each preset with the scenario's site keys (cluster_search.RUN_SETTINGS): the
    saved file names the row's preset, keeps those keys, and simulates at the ranked time."""
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(
        '[model]\npreset = "tiny-gpt"\n[training]\nseq_len = 64\nglobal_batch_size = 32\n'
        '[cluster]\npreset = "dgx-a100-80gb"\nnum_nodes = 1\npue = 1.3\n'
    )
    best, path, err = _saved(
        tmp_path, scenario, "--gpus", "8", "--cluster", "dgx-a100-80gb,dgx-h100-80gb", "--top", "1"
    )
    assert best["cluster"] == "dgx-h100-80gb"  # the faster GPU
    assert "on cluster dgx-h100-80gb" in err
    cluster = tomllib.loads(path.read_text())["cluster"]
    assert cluster["preset"] == "dgx-h100-80gb" and cluster["pue"] == 1.3
    assert abs(_step_s(path) - float(best["step_time_s"])) <= 1e-9 * float(best["step_time_s"])


def test_bad_save_paths_exit_2_and_keep_what_is_there(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(TINY.read_text())
    for args, said in (
        ([str(mine), "--gpus", "4", "--save-best", str(mine)], "sweep never replaces a file"),
        ([str(TINY), "--gpus", "4", "--save-best", str(tmp_path / "no" / "b.toml")], "does not exist"),
    ):
        code, out, err = cli_main("sweep", *args, "--workers=1")
        assert code == 2 and said in err, (args, err)
        assert "Traceback" not in out + err
    assert mine.read_text() == TINY.read_text()
    assert not (tmp_path / "b.toml").exists()
