"""Opt-in checkpoints of a measured run (torch.distributed.checkpoint) and resuming a killed run.

Layout of a run directory:

    RUN/checkpoints/step-000004/       one checkpoint after 4 finished steps: DCP's files (.metadata
                                       and one __R_0.distcp per rank) holding the model and optimizer
                                       state of every chunk of every rank, each tensor written once
    RUN/checkpoints/step-000004/rank-00001.pt
                                       rank 1's progress: steps done, its losses and step times so far,
                                       torch's CPU and CUDA RNG states (the data position is the step:
                                       the runtime's synthetic batches are a function of seed and step)
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
    from plancast.runtime.trainer import Trainer
    from plancast.simulator.scenario import Scenario
    from plancast.traces.rank_stream import RankEventWriter

COMPLETE = "COMPLETE"


def checkpoints_dir(run: RunDir) -> Path:
    return run.path / "checkpoints"


def step_dir(run: RunDir, steps_done: int) -> Path:
    return checkpoints_dir(run) / f"step-{steps_done:06d}"


def checkpoints_json(run: RunDir) -> Path:
    return run.measured_dir / "checkpoints.json"


def latest_complete(run: RunDir) -> int | None:
    """Steps done at the newest complete checkpoint of `run`, or None when it has none."""
    done = [
        int(p.name.removeprefix("step-"))
        for p in checkpoints_dir(run).glob("step-*")
        if (p / COMPLETE).exists() and p.name.removeprefix("step-").isdigit()
    ]
    return max(done, default=None)


def read_log(run: RunDir) -> dict[str, Any]:
    """``measured/checkpoints.json``: ``every_steps`` and lists ``saves`` and ``loads`` (empty when the
    run has not checkpointed)."""
    path = checkpoints_json(run)
    log: dict[str, Any] = {"every_steps": None, "saves": [], "loads": []}
    if path.exists():
        log.update(json.loads(path.read_text(encoding="utf-8")))
    return log


def checkpoint_bytes(path: Path) -> int:
    """Bytes of the model and optimizer state in a checkpoint folder (DCP's files, not the sidecars)."""
    return sum(
        p.stat().st_size for p in path.iterdir() if p.is_file() and p.suffix != ".pt" and p.name != COMPLETE
    )


def tensor_bytes(path: Path) -> int:
    """Bytes of the tensors a checkpoint holds, from DCP's metadata (its files add a per-item framing)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = dcp.FileSystemReader(path).read_metadata()
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


def checkpoint_arguments(s: Scenario, run: RunDir, every: int | None, resume: bool) -> list[str]:
    """The worker's checkpoint options; ValueError naming the fix when they cannot work."""
    if every is not None and every < 1:
        raise ValueError(f"--checkpoint-every must be at least 1, got {every}")
    if (every or s.training.checkpoint_every_steps or resume) and (problem := support_problem(s)):
        raise ValueError(problem)
    if resume and latest_complete(run) is None:
        raise ValueError(
            f"{run.path} has no complete checkpoint under {checkpoints_dir(run)} to resume from; "
            "start runs with --checkpoint-every K (or training.checkpoint_every_steps) to be resumable"
        )
    if resume and every is None:  # keep the killed run's interval
        every = read_log(run)["every_steps"]
    return (["--checkpoint-every", str(every)] if every else []) + (["--resume"] if resume else [])


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

    def maybe_save(self, steps_done: int, progress: Progress) -> None:
        """After step `steps_done` - 1: save when it is a multiple of `every` (collective: every rank)."""
        if self.every is None or steps_done % self.every:
            return
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        path = step_dir(self.run, steps_done)
        start = time.perf_counter()
        dcp.save(self._state(), checkpoint_id=path)
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

    def restore(self, writer: RankEventWriter) -> Progress:
        """Load the newest complete checkpoint into the trainer; put back this rank's events of the
        steps it covers into `writer` (the killed run's later steps are run again)."""
        steps_done = latest_complete(self.run)
        if steps_done is None:
            raise RuntimeError(f"{checkpoints_dir(self.run)} holds no complete checkpoint to resume from")
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        path = step_dir(self.run, steps_done)
        start = time.perf_counter()
        state = self._state()
        dcp.load(state, checkpoint_id=path)
        for c in self.trainer.chunks:
            part = state[f"stage{c.chunk.stage}"]
            set_state_dict(
                c.model, c.optimizer, model_state_dict=part["model"], optim_state_dict=part["optim"]
            )
        saved = torch.load(path / f"rank-{self.rank:05d}.pt", weights_only=False)
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
