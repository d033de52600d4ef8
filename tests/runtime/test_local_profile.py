"""The measured local-cpu machine through the real CLI: the first simulate measures this machine once
(one line on stderr) into the cache, later ones read it, --no-cache measures again; without torch one
line says so and the shipped numbers are used. Each test has its own cache directory."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from plancast.runtime.local_profile import cache_dir, machine_key, shape_key
from plancast.runtime.microbench import cores
from plancast.simulator.loader import load_scenario, parse_scenario
from tests.cli_runner import cli_main, cli_subprocess

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "examples" / "tiny-local-cpu.toml"


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PLANCAST_CACHE_DIR", str(cache))
    monkeypatch.delenv("PLANCAST_LOCAL_CPU", raising=False)  # tests/conftest.py pins the shipped numbers
    return cache


def _measured_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("local-cpu: measured this machine")]


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(cache, run folder, stderr) of one `plancast run` of SCENARIO into an empty cache: it measures this
    machine at SCENARIO's shape, once for the module; the tests that read that measurement start from a
    copy of its cache instead of measuring again (each measurement starts ranks for ~40 s)."""
    root = tmp_path_factory.mktemp("measured")
    cache, run = root / "cache", root / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLANCAST_CACHE_DIR", str(cache))
        patch.delenv("PLANCAST_LOCAL_CPU", raising=False)
        done = cli_subprocess("run", str(SCENARIO), "--out", str(run), "--steps", "2", timeout_s=900)
    assert done.returncode == 0, done.stderr
    return cache, run, done.stderr


@pytest.fixture
def measured_cache(fresh_cache: Path, measured_run: tuple[Path, Path, str]) -> Path:
    """This test's cache, holding the module's one measurement of SCENARIO's shape."""
    shutil.copytree(measured_run[0], fresh_cache)
    return fresh_cache


@pytest.mark.distributed
def test_a_simulate_reads_the_measurement_until_the_load_moves_or_no_cache(measured_cache: Path) -> None:
    """A simulate reads what the first use (the module's `plancast run`) measured into the cache: run and
    simulate share one record per machine and shape. (A simulate that measures on a cache miss: the MoE
    and three-rank tests below.)"""
    (path,) = measured_cache.glob("*/*.json")
    record = json.loads(path.read_text())
    assert record["world"] == 2 and record["cores"] >= 1 and record["threads"] == 1
    assert set(record["host"]["block_s"]) == {"plain", "tp", "sp", "fsdp"}
    assert 0.0 <= record["host"]["busy_send_s"] < 0.05  # a busy sender's transfer: at most a few slices
    assert isinstance(record["load_before"], float)  # the load it was measured under

    code, first, stderr = cli_main("simulate", str(SCENARIO), "--json")
    assert code == 0 and _measured_lines(stderr) == [], stderr
    code, second, stderr = cli_main("simulate", str(SCENARIO), "--json")
    assert code == 0 and _measured_lines(stderr) == []
    assert json.loads(second) == json.loads(first)  # the same cached measurement
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLANCAST_LOCAL_CPU", "shipped")
        shipped = cli_main("simulate", str(SCENARIO), "--json")[1]
    assert json.loads(first) != json.loads(shipped)  # it predicted on the measured machine

    path.write_text(json.dumps({**record, "load_before": record["load_before"] + 50.0}))
    code, _, busier = cli_main("simulate", str(SCENARIO), "--json")  # the load moved a lot
    assert code == 0 and _measured_lines(busier) == []
    assert "when its profile was measured" in busier and "--no-cache" in busier

    again = cli_subprocess("simulate", str(SCENARIO), "--json", "--no-cache", timeout_s=600)
    assert again.returncode == 0 and len(_measured_lines(again.stderr)) == 1
    assert len(list(measured_cache.glob("*/*.json"))) == 1  # measured again into the same record


@pytest.mark.distributed
def test_a_sweep_prices_its_plans_on_the_measured_machine(measured_cache: Path) -> None:
    """`sweep` reads (or takes) the measurement `simulate` uses at the scenario's shapes: the scenario's own
    plan, pinned, is ranked at simulate's step time, and said so; with the shipped numbers it is not."""
    pins = ("--pin", "pp=2", "--pin", "mb=2", "--pin", "schedule=1F1B", "--pin", "zero=0", "--pin",
            "recompute=none")  # fmt: skip
    code, out, stderr = cli_main("sweep", str(SCENARIO), "--top", "1", "--json", "--workers=1", *pins)
    assert code == 0 and _measured_lines(stderr) == [], stderr
    assert "every plan is priced on this machine as measured at the scenario's own shapes" in stderr
    ranked = json.loads(out)["plans"][0]
    assert ranked["plan"] == "tp1 pp2 dp1 mb2 1F1B rc=none zero0"
    code, simulated, _ = cli_main("simulate", str(SCENARIO), "--json")
    step = json.loads(simulated)["step_time_s"]
    assert code == 0 and abs(ranked["step_time_s"] - step) <= 1e-9 * step
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLANCAST_LOCAL_CPU", "shipped")
        code, shipped, stderr = cli_main("sweep", str(SCENARIO), "--top", "1", "--json", "--workers=1", *pins)
    assert code == 0 and "priced on this machine" not in stderr
    assert json.loads(shipped)["plans"][0]["step_time_s"] != ranked["step_time_s"]


@pytest.mark.distributed
def test_the_shipped_moe_example_measures_this_machine_without_a_failure(fresh_cache: Path) -> None:
    """The host microbenchmarks shard a probe block over tp, sp and FSDP; for an MoE model they probe its
    dense counterpart (the runtime shards no MoE block that way), so they measure, not crash."""
    result = cli_subprocess("simulate", str(REPO / "examples" / "tiny-moe-cpu.toml"), "--json", timeout_s=600)
    assert result.returncode == 0, result.stderr
    assert len(_measured_lines(result.stderr)) == 1
    assert "failed" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_the_cache_location_and_keys(fresh_cache: Path) -> None:
    assert cache_dir() == fresh_cache
    key = machine_key()  # hostname, CPU model, cores, torch version
    assert f"_{cores()}cores_torch" in key
    s = load_scenario(SCENARIO).scenario
    other = parse_scenario(
        {
            "model": {"preset": "tiny-gpt"},
            "training": {"seq_len": 128, "micro_batch_size": 4, "global_batch_size": 8, "dtype": "fp32"},
            "parallelism": {"pipeline_parallel_degree": 2},
            "cluster": {"preset": "local-cpu"},
        }
    ).scenario
    assert shape_key(s) != shape_key(other)  # the microbenchmarks run at the scenario's shapes


def test_without_torch_one_line_says_so_and_the_shipped_numbers_are_used(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANCAST_LOCAL_CPU", "shipped")
    code, shipped, _ = cli_main("simulate", str(SCENARIO), "--json")
    assert code == 0
    monkeypatch.delenv("PLANCAST_LOCAL_CPU")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    code, stdout, stderr = cli_main("simulate", str(SCENARIO), "--json")
    assert code == 0
    assert [line for line in stderr.splitlines() if line.startswith("local-cpu:")] == [
        "local-cpu: torch is not installed, so this machine cannot be measured; using the shipped "
        "local-cpu defaults (install plancast[runtime] for a measured profile)"
    ]
    assert json.loads(stdout) == json.loads(shipped)
    assert not fresh_cache.exists()


def test_a_scenario_that_sets_cluster_values_by_hand_is_not_measured(
    fresh_cache: Path, tmp_path: Path
) -> None:
    pinned = tmp_path / "pinned.toml"
    pinned.write_text(
        SCENARIO.read_text(encoding="utf-8").replace(
            'preset = "local-cpu"', 'preset = "local-cpu"\ncompute_slots_per_node = 2'
        ),
        encoding="utf-8",
    )
    code, _, stderr = cli_main("simulate", str(pinned), "--json")
    assert code == 0 and "local-cpu:" not in stderr
    assert not fresh_cache.exists()


@pytest.mark.distributed
def test_a_run_on_local_cpu_records_the_measured_machine(measured_run: tuple[Path, Path, str]) -> None:
    """`plancast run` measures too (first use), and RUN/scenario.toml holds the measured cluster, so
    `plancast compare RUN` predicts on what was measured."""
    cache, run, stderr = measured_run
    assert len(_measured_lines(stderr)) == 1
    assert len(list(cache.glob("*/*.json"))) == 1
    s = load_scenario(run / "scenario.toml").scenario
    assert s.cluster.gpu.name.endswith("(measured)")
    assert s.cluster.compute_slots_per_node is not None


@pytest.mark.distributed
def test_three_ranks_of_a_four_head_model_measure_with_two(fresh_cache: Path, tmp_path: Path) -> None:
    """The tensor-parallel block microbenchmark splits the heads over the job's ranks: 3 ranks of
    tiny-gpt (4 heads) measure with 2 instead of failing into the shipped defaults."""
    import tomli_w

    path = tmp_path / "dp3.toml"
    scenario = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 6},
        "parallelism": {"data_parallel_degree": 3},
        "cluster": {"preset": "local-cpu", "gpus_per_node": 3},
    }
    path.write_text(tomli_w.dumps(scenario))
    done = cli_subprocess("simulate", str(path), "--json", timeout_s=600)
    assert done.returncode == 0, done.stderr
    assert "microbenchmarks failed" not in done.stderr
    (record,) = [json.loads(p.read_text()) for p in fresh_cache.glob("*/*.json")]
    assert record["world"] == 2
    assert 0.0 <= record["host"]["busy_send_s"] < 0.05
    # the executor's host time per transfer side: Python bookkeeping and a gloo post, ~0.1 ms here
    assert 1e-6 < record["host"]["transfer_host_s"] < 5e-3


def test_a_plan_the_runtime_cannot_run_is_refused_before_measuring(fresh_cache: Path, tmp_path: Path) -> None:
    """fp16 (no loss scaler in the runtime) is known from the scenario: no microbenchmark runs first."""
    text = SCENARIO.read_text().replace('dtype = "fp32"', 'dtype = "fp16"')
    scenario = tmp_path / "fp16.toml"
    scenario.write_text(text)
    result = cli_subprocess("run", str(scenario), "--out", str(tmp_path / "run"), timeout_s=120)
    assert result.returncode == 2 and "loss scaler" in result.stderr
    assert _measured_lines(result.stderr) == [] and not list(fresh_cache.glob("*/*.json"))
    assert not (tmp_path / "run").exists()


@pytest.mark.distributed
def test_a_gpu_cluster_plan_without_a_gpu_says_it_runs_on_cpu(tmp_path: Path) -> None:
    text = SCENARIO.read_text().replace('preset = "local-cpu"', 'preset = "dgx-h100-80gb"\ngpus_per_node = 2')
    scenario = tmp_path / "h100.toml"
    scenario.write_text(text)
    result = cli_subprocess(
        "run", str(scenario), "--out", str(tmp_path / "run"), "--steps", "2", timeout_s=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no CUDA GPU: the H100-SXM5-80GB plan runs on CPU cores" in result.stderr.replace("\n", " ")


def test_run_refuses_tp_comm_overlap_it_would_ignore(tmp_path: Path) -> None:
    """The runtime's DTensor collectives block: a run of a tp_comm_overlap plan would not be the plan that
    was predicted (it ran silently before)."""
    path = tmp_path / "overlap.toml"
    path.write_text(
        '[model]\npreset = "tiny-gpt"\n[training]\nseq_len = 128\ndtype = "fp32"\n'
        "[parallelism]\ntensor_parallel_degree = 2\ntp_comm_overlap = true\n"
        '[cluster]\npreset = "local-cpu"\n'
    )
    code, _, err = cli_main("run", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and "tp_comm_overlap" in err and not (tmp_path / "run").exists()


@pytest.mark.distributed
def test_import_kineto_predicts_on_the_measured_machine_as_simulate_does(
    measured_cache: Path, tmp_path: Path
) -> None:
    """An exported prediction imported back (--scenario local-cpu) is compared with the same prediction:
    import-kineto measured nothing and predicted with the shipped constants (+70% on this machine).
    Both read the module's measurement from the cache, so they run in this process."""
    run, back = tmp_path / "run", tmp_path / "back"
    assert cli_main("simulate", str(SCENARIO), "--out", str(run))[0] == 0
    assert cli_main("export", str(run), "--source", "predicted")[0] == 0
    code, _, stderr = cli_main(
        "import-kineto", str(run / "chrome" / "predicted"), "--out", str(back), "--scenario", str(SCENARIO)
    )
    assert code == 0, stderr
    assert _measured_lines(stderr) == []  # the cached measurement, not the shipped numbers nor a new one
    code, stdout, stderr = cli_main("compare", str(back), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["step_time_error"] == pytest.approx(0.0, abs=1e-9)
