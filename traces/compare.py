"""Compare one run directory: reconcile its predicted and measured events and write RUN/compare/.

Shared by `plancast compare`, the demo and anything else that compares a run on disk; the
dashboard reconciles in memory with the same `reconcile` underneath.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from plancast.traces.checkpoints import checkpoint_components
from plancast.traces.contention import contention, few_steps, machine_speed, share_or_none, unsteady_steps
from plancast.traces.reconcile import reconcile, to_summary
from plancast.traces.store import (
    RunDir,
    TraceReadError,
    read_json_object,
    read_measured,
    read_predicted,
    write_json,
)
from plancast.traces.telemetry import busy_gpu, read_telemetry


class CompareError(ValueError):
    """A run directory that cannot be compared at all (missing, or no measured events)."""


def compare_run_dir(
    run_path: Path,
    ensure_predicted: Callable[[Path], None],
    reference_share: float = 1.0,
    reference_probe: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Reconcile RUN's predicted and measured events; writes RUN/compare/summary.json and returns it.

    ``ensure_predicted(run_path)`` is called first: the caller decides how a missing prediction is made
    (the CLI simulates RUN/scenario.toml onto disk). ``reference_share`` is the core share the
    prediction's constants were measured at, ``reference_probe`` the speed probe they were measured at
    (``probe_s`` and ``workload``; traces/contention.py). Damaged inputs (an unreadable or
    missing rank file, a cut summary) are left out and listed under "problems"; everything else is
    still compared."""
    run = RunDir(run_path)
    if not run.path.is_dir():
        raise CompareError(f"run directory not found: {run_path}")
    ensure_predicted(run_path)
    measured = read_measured(run)
    problems = list(measured.problems)
    if measured.events.empty:
        reasons = "; ".join(problems) or "no rank files"
        raise CompareError(
            f"{run_path}/measured/ has no readable events ({reasons}); "
            f"run `plancast run SCENARIO --out {run_path}`"
        )
    predicted_summary = optional_json(run.predicted_summary, problems)
    measured_summary = optional_json(run.measured_summary, problems)
    rec = reconcile(
        read_predicted(run),
        measured.events,
        predicted_summary=predicted_summary,
        measured_summary=measured_summary,
    )
    summary = {
        **to_summary(rec),
        **measured_status(measured_summary, unreadable=run.measured_summary.exists()),
        "measured_core_wait_s": measured_core_wait(measured_summary, run.measured_summary, problems),
        "measured_gpu": measured_gpu(run.telemetry, problems),
        "problems": problems,
    }
    summary |= machine_speed(measured_summary, reference_probe)
    summary |= contention(
        summary["step_time_predicted_s"],
        summary["step_time_measured_s"],
        measured_share(measured_summary, run.measured_summary, problems),
        reference_share,
        share_or_none((measured_summary or {}).get("core_share_own")),
        summary["speed_factor"],
    )
    steps = few_steps(len(summary["scored_steps"])), unsteady_steps(measured_summary)
    summary["warnings"] = [w for w in steps if w]
    checkpoints = optional_json(run.measured_dir / "checkpoints.json", problems)
    summary["components"] += checkpoint_components((predicted_summary or {}).get("checkpoint"), checkpoints)
    run.compare_dir.mkdir(parents=True, exist_ok=True)
    write_json(run.compare_summary, summary)
    return summary


def measured_status(measured_summary: dict[str, Any] | None, unreadable: bool = False) -> dict[str, Any]:
    """How the measured run ended: ``ok``, ``failed``, ``interrupted``, or ``unknown`` (no summary:
    the run is still going, or was killed before it could write one; or a summary that cannot be read,
    ``unreadable``), with its reason if any."""
    if measured_summary is None:
        reason = "measured/summary.json cannot be read (the error below says why)" if unreadable else None
        return {"measured_status": "unknown", "measured_reason": reason}
    status = measured_summary.get("status")
    return {
        "measured_status": status if isinstance(status, str) else "unknown",
        "measured_reason": measured_summary.get("reason"),
    }


def measured_core_wait(
    measured_summary: dict[str, Any] | None, path: Path, problems: list[str]
) -> float | None:
    """The ranks' threads' wait for a CPU core a step (runtime/schedstat.py), where the run recorded
    it; a value that is not a number of seconds is noted as a problem and left out."""
    wait = (measured_summary or {}).get("core_wait_s")
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < float("inf"):
        problems.append(f"{path}: core_wait_s is {wait!r}, not seconds >= 0 (compared without it)")
        return None
    return float(wait)


def measured_share(measured_summary: dict[str, Any] | None, path: Path, problems: list[str]) -> float | None:
    """The run's core share (runtime/worker.py), where recorded; one not in (0, 1] is a problem."""
    raw = (measured_summary or {}).get("core_share")
    share = share_or_none(raw)
    if raw is not None and share is None:
        problems.append(f"{path}: core_share is {raw!r}, not a share in (0, 1] (compared without it)")
    return share


def measured_gpu(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """What the GPUs ran at while busy (traces/telemetry.busy_gpu); None without telemetry or a GPU. An
    unreadable telemetry file is noted as a problem and left out."""
    if not path.exists():
        return None
    try:
        return busy_gpu(read_telemetry(path))
    except TraceReadError as e:
        problems.append(str(e))
        return None


def optional_json(
    path: Path, problems: list[str], note: str = "compared without it"
) -> dict[str, Any] | None:
    """A summary file, or None with a problem noted when it is unreadable (missing is fine)."""
    if not path.exists():
        return None
    try:
        return read_json_object(path)
    except TraceReadError as e:
        problems.append(f"{e} ({note})")
        return None
