"""Which pipeline schedules each framework ships (simulator/catalog/frameworks.py PIPELINE_SCHEDULES):
a plan whose framework does not ship its schedule is warned about, by `validate` and beside each ranked
plan of a sweep (one line for all the ranks it applies to); plancast still prices it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plancast.simulator.catalog.frameworks import PIPELINE_SCHEDULES, schedule_warnings
from plancast.simulator.schedules import SCHEDULES
from plancast.simulator.sweep_inputs import warning_lines
from tests.cli_runner import cli_main


@pytest.mark.parametrize("framework", sorted(PIPELINE_SCHEDULES))
def test_a_schedule_is_warned_about_exactly_where_its_framework_lacks_it(framework: str) -> None:
    ships = PIPELINE_SCHEDULES[framework]  # type: ignore[index]
    assert set(ships) <= set(SCHEDULES) and "1F1B" in ships
    for name in SCHEDULES:
        warned = schedule_warnings(framework, name, pp=4)  # type: ignore[arg-type]
        assert bool(warned) == (name not in ships), (framework, name)
        assert not schedule_warnings(framework, name, pp=1)  # type: ignore[arg-type]
        if warned:
            assert f"'{name}'" in warned[0] and framework in warned[0]


def test_upstream_megatron_lm_runs_only_1f1b_and_its_interleaved_form() -> None:
    assert PIPELINE_SCHEDULES["megatron-lm"] == ("1F1B", "Interleaved1F1B")
    assert "ZBH2" not in PIPELINE_SCHEDULES["torchtitan"] and "DualPipeV" in PIPELINE_SCHEDULES["torchtitan"]


def test_warning_lines_name_each_warning_once_with_its_ranks() -> None:
    lines = warning_lines([["a"], ["a", "b"], ["a"], [], ["a"], ["b"]])
    assert lines == ["#1-#3, #5: a", "#2, #6: b"]
    assert warning_lines([[], []]) == []


def _scenario(tmp_path: Path, framework: str, schedule: str) -> str:
    path = tmp_path / f"{framework}-{schedule}.toml"
    path.write_text(
        '[model]\npreset = "tiny-gpt"\n[training]\nseq_len = 64\nglobal_batch_size = 32\n'
        f'[parallelism]\nframework = "{framework}"\npipeline_parallel_degree = 2\n'
        f'pipeline_parallel_schedule = "{schedule}"\nvirtual_stages_per_rank = 2\n'
        '[cluster]\npreset = "dgx-a100-80gb"\nnum_nodes = 1\n'
    )
    return str(path)


def test_validate_and_sweep_name_the_schedule_megatron_lm_does_not_ship(tmp_path: Path) -> None:
    code, out, err = cli_main("validate", _scenario(tmp_path, "megatron-lm", "ZBV"))
    assert code == 0 and "framework megatron-lm does not ship it" in out + err
    code, out, err = cli_main("validate", _scenario(tmp_path, "torchtitan", "ZBV"))
    assert code == 0 and "does not ship" not in out + err
    scenario = _scenario(tmp_path, "megatron-lm", "Interleaved1F1B")
    pins = ["--gpus", "8", "--top", "4", "--pin", "pp=2", "--pin", "tp=1", "--workers", "1"]
    code, out, err = cli_main("sweep", scenario, *pins, "--pin", "schedule=ZBV", "--json")
    assert code == 0, err
    rows = json.loads(out)["plans"]
    assert len(rows) == 4 and all(any("does not ship" in w for w in r["warnings"]) for r in rows)
    code, out, err = cli_main("sweep", scenario, *pins, "--pin", "schedule=ZBV")
    assert code == 0 and out.count("does not ship") == 1 and "#1-#4: " in out, out
    code, out, err = cli_main("sweep", scenario, *pins, "--pin", "schedule=1F1B,Interleaved1F1B")
    assert code == 0 and "does not ship" not in out, out


def test_a_ranked_plan_keeps_a_warning_the_scenario_shares_unless_every_plan_has_it(tmp_path: Path) -> None:
    """A DualPipeV scenario under megatron-lm: the sweep's DualPipeV plans among ZBV and 1F1B ones carry
    the schedule warning (it used to be dropped as the scenario's own); where every ranked plan has it,
    the scenario's own line says it once."""
    from plancast.simulator.loader import load_scenario
    from plancast.simulator.sweep_axes import Plan
    from plancast.simulator.sweep_inputs import plan_warnings

    base = load_scenario(Path(_scenario(tmp_path, "megatron-lm", "DualPipeV"))).scenario
    dual = Plan(1, 2, 4, 1, "DualPipeV", 2, "none", False, 1)
    plain = Plan(1, 2, 4, 1, "1F1B", 1, "none", False, 1)
    mixed = plan_warnings(base, 8, [dual, plain])
    assert any("'DualPipeV'" in w for w in mixed[0]) and not mixed[1]
    alike = plan_warnings(base, 8, [dual, dual])
    assert alike == [[], []]
