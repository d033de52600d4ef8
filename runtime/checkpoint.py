"""Opt-in checkpoints of a measured run (torch.distributed.checkpoint) and resuming a killed run.

Layout of a run directory:

    RUN/checkpoints/step-000004/       one checkpoint after 4 finished steps: DCP's files (.metadata
                                       and one __R_0.distcp per rank) holding the model and optimizer
                                       state of every chunk of every rank, each tensor written once
    RUN/checkpoints/step-000004/rank-00001.pt
                                       rank 1's progress: steps done, its losses and step times so far,
                                       torch's CPU and CUDA RNG states (the data position is the step:
                                       the runtime's synthetic batches are a function of seed and step)
    RUN/checkpoints/step-000004/scenario.json
                                       the resolved scenario it was taken with: a resume under a changed
                                       scenario is refused, naming the keys
    RUN/checkpoints/step-000004/COMPLETE
                                       written by rank 0 after every rank finished: only complete
                                       checkpoints are resumed from
    RUN/measured/checkpoints.json      rank 0: every save (step, bytes, seconds) and load (step, seconds)

Importing this module does not import torch (the launcher uses the layout helpers); saving and loading
do. The state dicts come from ``torch.distributed.checkpoint.state_dict.get_state_dict``, which
handles DDP, FSDP2 and DTensor (tensor-parallel) parameters alike.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plancast.traces.store import RunDir, read_events, write_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from plancast.runtime.trainer import Trainer
    from plancast.simulator.scenario import Scenario
    from plancast.traces.rank_stream import RankEventWriter

COMPLETE = "COMPLETE"
SCENARIO_RECORD = "scenario.json"  # the resolved scenario the checkpoint was taken with


def checkpoints_dir(run: RunDir) -> Path:
    return run.path / "checkpoints"


def step_dir(run: RunDir, steps_done: int) -> Path:
    return checkpoints_dir(run) / f"step-{steps_done:06d}"


def checkpoints_json(run: RunDir) -> Path:
    return run.measured_dir / "checkpoints.json"


def latest_complete(run: RunDir) -> int | None:
    """Steps done at the newest complete checkpoint of `run`, or None when it has none."""
    return max((steps for steps, _ in complete_checkpoints(run)), default=None)


def read_log(run: RunDir) -> dict[str, Any]:
    """``measured/checkpoints.json``: ``every_steps`` and lists ``saves`` and ``loads`` (empty when the
    run has not checkpointed)."""
    from plancast.traces.store import read_json_object

    path = checkpoints_json(run)
    log: dict[str, Any] = {"every_steps": None, "saves": [], "loads": []}
    if path.exists():  # TraceReadError (exit 2) naming the file when it is damaged
        log.update(read_json_object(path))
    return log


def checkpoint_bytes(path: Path) -> int:
    """Bytes of the model and optimizer state in a checkpoint folder (DCP's files, not the sidecars)."""
    return sum(
        p.stat().st_size
        for p in path.iterdir()
        if p.is_file() and p.suffix not in (".pt", ".json") and p.name != COMPLETE
    )


def tensor_bytes(path: Path) -> int:
    """Bytes of the tensors a checkpoint holds, from DCP's metadata (its files add a per-item framing)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from plancast.runtime.checkpoint_safety import read_metadata

    metadata = read_metadata(path)
    return sum(
        m.size.numel() * m.properties.dtype.itemsize
        for m in metadata.state_dict_metadata.values()
        if isinstance(m, TensorStorageMetadata)
    )


def support_problem(s: Scenario) -> str | None:
    """Why this plan cannot be checkpointed, or None. ZeRO-1's ZeroRedundancyOptimizer keeps its state
    where ``get_state_dict`` cannot see it (it needs ``consolidate_state_dict`` onto one rank)."""
    if s.parallelism.zero_stage == 1 and s.dp > 1:
        return (
            "checkpointing a ZeRO-1 plan (torch's ZeroRedundancyOptimizer) is not supported; "
            "use parallelism.zero_stage = 0, 2 or 3 for a checkpointed run"
        )
    return None


def expert_keyed(model: Any, part: dict[str, Any]) -> dict[str, Any]:
    """One chunk's ``{"model", "optim"}`` state with its stacked routed experts keyed per global expert
    (runtime/moe.py ``by_global_expert``): expert-parallel ranks share parameter names, not experts."""
    from plancast.runtime.moe import by_global_expert

    optim = {**part["optim"], "state": by_global_expert(model, part["optim"]["state"])}
    return {"model": by_global_expert(model, part["model"]), "optim": optim}


def checkpoint_arguments(
    s: Scenario, run: RunDir, every: int | None, resume: bool, say: Callable[[str], None] = print
) -> list[str]:
    """The worker's checkpoint options; ValueError naming the fix when they cannot work. With `resume`,
    the checkpoint to resume is checked first (runtime/checkpoint_safety.py): one that names code is
    refused, a damaged newest one gives way to the previous complete one (`say` tells which)."""
    if every is not None and every < 1:
        raise ValueError(f"--checkpoint-every must be at least 1, got {every}")
    if (every or s.training.checkpoint_every_steps or resume) and (problem := support_problem(s)):
        raise ValueError(problem)
    if not resume:
        return ["--checkpoint-every", str(every)] if every else []
    if every is None:  # keep the killed run's interval
        every = read_log(run)["every_steps"]
    step = resumable_step(run, s.tp * s.pp * s.dp * s.cp, say)
    check_same_plan(s, run, step)
    return (["--checkpoint-every", str(every)] if every else []) + ["--resume-step", str(step)]


def complete_checkpoints(run: RunDir) -> list[tuple[int, Path]]:
    """(steps done, folder) of every checkpoint of `run` that rank 0 marked complete."""
    return [
        (int(p.name.removeprefix("step-")), p)
        for p in checkpoints_dir(run).glob("step-*")
        if (p / COMPLETE).exists() and p.name.removeprefix("step-").isdigit()
    ]


def resumable_step(run: RunDir, world_size: int, say: Callable[[str], None] = print) -> int:
    """Steps done at the newest complete checkpoint that reads whole and safely; ValueError otherwise."""
    from plancast.runtime.checkpoint_safety import CheckpointDamagedError, find_resumable

    folders = complete_checkpoints(run)
    if not folders:
        raise ValueError(
            f"{run.path} has no complete checkpoint under {checkpoints_dir(run)} to resume from; "
            "start runs with --checkpoint-every K (or training.checkpoint_every_steps) to be resumable"
        )
    try:
        step, skipped = find_resumable(folders, world_size)
    except CheckpointDamagedError as err:
        raise ValueError(f"{run.path}: {err}; start the run again without --resume") from None
    for why in skipped:
        say(f"plancast: {why}: resuming from the previous complete checkpoint, step-{step:06d}")
    return step


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# Keys a resumed run may change: how long it runs and how often it saves, not what it trains.
RESUME_MAY_CHANGE = frozenset({"training.steps", "training.checkpoint_every_steps"})
# Of [cluster], only the shape is the plan's: the rest describes the hardware for the prediction (a
# local-cpu machine re-measured between the kill and the resume changes it, the training does not).
PLAN_CLUSTER_KEYS = frozenset({"cluster.num_nodes", "cluster.gpus_per_node"})


def scenario_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``key: saved -> now`` for every key (dotted path) of the plan whose value differs: [model],
    [training] but RESUME_MAY_CHANGE, [parallelism], and the cluster's shape (PLAN_CLUSTER_KEYS)."""
    before, after = _flat(saved), _flat(now)
    keys = sorted(
        k
        for k in (before.keys() | after.keys()) - RESUME_MAY_CHANGE
        if not k.startswith("cluster.") or k in PLAN_CLUSTER_KEYS
    )
    return [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys if before.get(k) != after.get(k)]


def check_same_plan(s: Scenario, run: RunDir, steps_done: int) -> None:
    """ValueError naming the keys when `s` is not the scenario the checkpoint was taken with (its
    ``scenario.json``): one run directory must not mix two plans."""
    from plancast.simulator.loader import to_toml_dict
    from plancast.traces.store import read_json_object

    record = step_dir(run, steps_done) / SCENARIO_RECORD
    if not record.exists():  # a checkpoint of an older plancast: nothing to compare with
        return
    saved = json.loads(json.dumps(read_json_object(record)))
    changes = scenario_changes(saved, json.loads(json.dumps(to_toml_dict(s))))
    if changes:
        raise ValueError(
            f"--resume {run.path}: the scenario differs from the one its checkpoint "
            f"step-{steps_done:06d} was taken with ({'; '.join(changes)}); a resumed run must keep its "
            f"plan: put those keys back in {run.scenario_toml}, or start a new run with --out NEW"
        )


@dataclass
class Progress:
    """What a rank had done when the checkpoint was taken."""

    steps_done: int = 0
    losses: list[float | None] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)


@dataclass
class Checkpointer:
    """Saves every `every` steps (None: never) and restores from the newest complete checkpoint."""

    trainer: Trainer
    run: RunDir
    rank: int
    every: int | None

    def _state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        state: dict[str, Any] = {}
        for c in self.trainer.chunks:  # chunk keys by stage: unique across the pipeline
            model, optim = get_state_dict(c.model, c.optimizer)
            state[f"stage{c.chunk.stage}"] = {"model": model, "optim": optim}
        return state

    def _written(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` as DCP writes and reads it: stacked routed experts keyed per global expert (views of
        ``state``'s tensors, so a load into it fills ``state``)."""
        return {
            f"stage{c.chunk.stage}": expert_keyed(c.model, state[f"stage{c.chunk.stage}"])
            for c in self.trainer.chunks
        }

    def maybe_save(self, steps_done: int, progress: Progress) -> None:
        """After step `steps_done` - 1: save when it is a multiple of `every` (collective: every rank)."""
        if self.every is None or steps_done % self.every:
            return
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        path = step_dir(self.run, steps_done)
        start = time.perf_counter()
        dcp.save(self._written(self._state()), checkpoint_id=path)
        torch.save(
            {
                "steps_done": steps_done,
                "losses": progress.losses,
                "step_times_s": progress.step_times_s,
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
            },
            path / f"rank-{self.rank:05d}.pt",
        )
        dist.barrier()
        save_s = time.perf_counter() - start
        if self.rank == 0:
            from plancast.simulator.loader import to_toml_dict

            write_json(path / SCENARIO_RECORD, to_toml_dict(self.trainer.scenario))
            (path / COMPLETE).touch()
            log = read_log(self.run)
            log["every_steps"] = self.every
            log["saves"].append(
                {
                    "step": steps_done,
                    "bytes": checkpoint_bytes(path),
                    "tensor_bytes": tensor_bytes(path),
                    "save_s": save_s,
                    "path": str(path),
                }
            )
            write_json(checkpoints_json(self.run), log)

    def restore(self, writer: RankEventWriter, steps_done: int) -> Progress:
        """Load the checkpoint after `steps_done` steps into the trainer (the launcher chose it:
        resumable_step), reading no code from it; put back this rank's events of the steps it covers
        into `writer` (the killed run's later steps are run again)."""
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        from plancast.runtime.checkpoint_safety import SafeFileSystemReader, SafeLoadPlanner, load_progress

        path = step_dir(self.run, steps_done)
        start = time.perf_counter()
        state = self._state()
        dcp.load(self._written(state), storage_reader=SafeFileSystemReader(path), planner=SafeLoadPlanner())
        for c in self.trainer.chunks:
            part = state[f"stage{c.chunk.stage}"]
            set_state_dict(
                c.model, c.optimizer, model_state_dict=part["model"], optim_state_dict=part["optim"]
            )
        saved = load_progress(path / f"rank-{self.rank:05d}.pt")
        torch.set_rng_state(saved["rng"])
        if saved.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved["cuda_rng"])
        dist.barrier()
        load_s = time.perf_counter() - start
        events_path = self.run.rank_files().get(self.rank)  # the killed run's stream, or its parquet
        if events_path is not None:
            events = read_events(events_path)
            writer.append_step(events[events["step"] < steps_done].reset_index(drop=True))
        if self.rank == 0:
            log = read_log(self.run)
            log["loads"].append({"step": steps_done, "load_s": load_s, "path": str(path)})
            write_json(checkpoints_json(self.run), log)
        return Progress(steps_done, list(saved["losses"]), list(saved["step_times_s"]))
