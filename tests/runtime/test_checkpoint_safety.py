"""A run folder is data: resuming it runs no code from it, keeps its plan, and survives a damaged save.

Checkpoints here are real DCP checkpoints written in this process (a small model and its AdamW state)
beside real ``rank-NNNNN.pt`` progress files, in the layout runtime/checkpoint.py writes; the planted
payloads are pickles whose ``__reduce__`` would create a marker file if anything unpickled them.
"""

from __future__ import annotations

import builtins
import json
import pickle
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from plancast.runtime.checkpoint import COMPLETE, SCENARIO_RECORD, checkpoint_arguments, step_dir
from plancast.runtime.checkpoint_safety import SafeFileSystemReader, SafeLoadPlanner, read_metadata
from plancast.simulator.loader import load_scenario, to_toml_dict
from plancast.traces.store import RunDir
from tests.cli_runner import REPO, cli_main

WORLD = 2  # examples/tiny-local-cpu.toml: pipeline_parallel_degree = 2


class Payload:
    """Unpickling this creates `marker`: the proof that a loader ran code from the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, str]]:
        return builtins.open, (str(self.marker), "w")


def model_state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    ms, os_ = get_state_dict(model, optim)
    return {"stage0": {"model": ms, "optim": os_}}


def save_checkpoint(run: Path, steps_done: int) -> Path:
    """A complete checkpoint after `steps_done` steps, as rank 0 of a 2-rank run leaves it."""
    path = step_dir(RunDir(run), steps_done)
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore")
        dcp.save(model_state(), checkpoint_id=path)
    for rank in range(WORLD):
        progress = {
            "steps_done": steps_done,
            "losses": [1.0] * steps_done,
            "step_times_s": [0.1] * steps_done,
        }
        torch.save({**progress, "rng": torch.get_rng_state(), "cuda_rng": None}, path / f"rank-{rank:05d}.pt")
    scenario = load_scenario(run / "scenario.toml").scenario
    (path / SCENARIO_RECORD).write_text(json.dumps(to_toml_dict(scenario)))
    (path / COMPLETE).touch()
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run folder of examples/tiny-local-cpu.toml with one complete checkpoint after 2 steps."""
    folder = tmp_path / "run"
    folder.mkdir()
    scenario = load_scenario(REPO / "examples" / "tiny-local-cpu.toml").scenario
    (folder / "scenario.toml").write_text(tomli_w.dumps(to_toml_dict(scenario)))
    save_checkpoint(folder, 2)
    return folder


def plant_in_metadata(path: Path, marker: Path) -> None:
    (path / ".metadata").write_bytes(pickle.dumps(Payload(marker)))


def plant_in_progress(path: Path, marker: Path) -> None:
    torch.save(
        {"steps_done": 2, "losses": [], "step_times_s": [], "rng": Payload(marker)}, path / "rank-00001.pt"
    )


def plant_in_metadata_tail(path: Path, marker: Path) -> None:
    """The real metadata object, with the payload hidden in one of its fields."""
    metadata = pickle.loads((path / ".metadata").read_bytes())  # our own file, just written
    metadata.planner_data = {"x": Payload(marker)}
    (path / ".metadata").write_bytes(pickle.dumps(metadata))


@pytest.mark.parametrize("plant", [plant_in_metadata, plant_in_progress, plant_in_metadata_tail])
def test_a_planted_payload_never_runs_on_resume(
    run: Path, tmp_path: Path, plant: Callable[[Path, Path], None]
) -> None:
    marker = tmp_path / "PWNED"
    plant(step_dir(RunDir(run), 2), marker)
    code, _, stderr = cli_main("run", "--resume", str(run))
    assert not marker.exists(), "the checkpoint's payload ran"
    assert code == 2, stderr
    assert "refused without loading it" in stderr and "Traceback" not in stderr
    assert not (run / "measured").exists()  # nothing was started


def test_a_changed_scenario_is_refused_naming_the_key(run: Path) -> None:
    data = tomllib.loads((run / "scenario.toml").read_text())
    before = data["training"]["global_batch_size"]
    data["training"]["global_batch_size"] = before * 2
    (run / "scenario.toml").write_text(tomli_w.dumps(data))
    code, _, stderr = cli_main("run", "--resume", str(run))
    assert code == 2, stderr
    assert f"training.global_batch_size: {before} -> {before * 2}" in stderr
    assert "Traceback" not in stderr


def test_more_steps_on_resume_are_allowed(run: Path) -> None:
    data = tomllib.loads((run / "scenario.toml").read_text())
    data["training"]["steps"] = 50
    (run / "scenario.toml").write_text(tomli_w.dumps(data))
    scenario = load_scenario(run / "scenario.toml").scenario
    assert checkpoint_arguments(scenario, RunDir(run), None, resume=True, say=print)[-2:] == [
        "--resume-step",
        "2",
    ]


def cut_distcp(path: Path) -> None:
    data = path / "__0_0.distcp"
    data.write_bytes(data.read_bytes()[:100])


def cut_progress(path: Path) -> None:
    data = path / "rank-00001.pt"
    data.write_bytes(data.read_bytes()[:200])


def cut_metadata(path: Path) -> None:
    data = path / ".metadata"
    data.write_bytes(data.read_bytes()[:-40])


def drop_progress(path: Path) -> None:
    (path / "rank-00000.pt").unlink()


@pytest.mark.parametrize("damage", [cut_distcp, cut_progress, cut_metadata, drop_progress])
def test_a_damaged_newest_checkpoint_falls_back_and_says_so(
    run: Path, damage: Callable[[Path], None]
) -> None:
    damage(save_checkpoint(run, 4))
    said: list[str] = []
    scenario = load_scenario(run / "scenario.toml").scenario
    args = checkpoint_arguments(scenario, RunDir(run), None, resume=True, say=said.append)
    assert args[-2:] == ["--resume-step", "2"]
    assert len(said) == 1 and "step-000004 is damaged" in said[0] and "step-000002" in said[0]


def test_no_readable_checkpoint_exits_2(run: Path) -> None:
    cut_distcp(step_dir(RunDir(run), 2))
    code, _, stderr = cli_main("run", "--resume", str(run))
    assert code == 2, stderr
    assert "no complete checkpoint can be read" in stderr and "is cut short" in stderr


def test_metadata_naming_a_file_outside_its_folder_is_refused(run: Path) -> None:
    path = step_dir(RunDir(run), 2)
    metadata = read_metadata(path)
    for info in metadata.storage_data.values():
        info.relative_path = "../../secret"
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    code, _, stderr = cli_main("run", "--resume", str(run))
    assert code == 2 and "outside its folder" in stderr


def test_the_safe_reader_loads_a_real_checkpoint(run: Path) -> None:
    state = model_state()
    target = {
        "stage0": {
            "model": {k: torch.zeros_like(v) for k, v in state["stage0"]["model"].items()},
            "optim": model_state()["stage0"]["optim"],
        }
    }
    path = step_dir(RunDir(run), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=SafeFileSystemReader(path), planner=SafeLoadPlanner())
    for key, value in state["stage0"]["model"].items():
        assert torch.equal(target["stage0"]["model"][key], value)
    assert target["stage0"]["optim"]["param_groups"][0]["lr"] == pytest.approx(1e-3)


@pytest.mark.parametrize(
    ("key", "value", "refused"),
    [
        (("parallelism", "pipeline_parallel_degree"), 1, True),
        (("model", "hidden_size"), 128, True),
        (("cluster", "gpus_per_node"), 4, True),
        (("training", "steps"), 99, False),
        (("cluster", "compute_slots_per_node"), 7, False),  # hardware, as a re-measured machine
    ],
)
def test_only_a_change_of_plan_is_refused(key: tuple[str, str], value: object, refused: bool) -> None:
    from plancast.runtime.checkpoint import scenario_changes

    saved = to_toml_dict(load_scenario(REPO / "examples" / "tiny-local-cpu.toml").scenario)
    now = json.loads(json.dumps(saved))
    now[key[0]][key[1]] = value
    changes = scenario_changes(saved, now)
    assert bool(changes) == refused and all(".".join(key) in c for c in changes)
