"""What fresh measurements of this machine (runtime/microbench.py records, one per PLANCAST_CACHE_DIR)
disagree on, and which of their figures moves each plan's prediction between them: the microbenchmark
to make steadier first (issue 36, item 2). Used by benchmarks/cpu_out_of_box.py; torch-free."""

from __future__ import annotations

import copy
import statistics
from typing import Any

from plancast.simulator.calibration.microbench import profile_cluster
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate

UNSTEADY_FIELDS = 1.25
"""A microbenchmark figure whose fresh measurements lie more than 25% apart is named: the loop's
per-plan target is a 25% error (issue 36), so one such figure can move a prediction by it alone."""
SPEED_KEYS = ("speed_probe", "load_before", "cpu_share")  # the machine's state, reported on its own line


def measured_figures(record: dict[str, Any]) -> dict[str, float]:
    """A machine record's measured figures by a readable name (``link all_reduce 1024 B``,
    ``host.block_s.tp.3``), the machine's state (SPEED_KEYS) and its description left out."""
    figures: dict[str, float] = {}

    def walk(value: Any, name: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{name}.{key}" if name else str(key))
        elif isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            figures[name] = float(value)

    for key, value in record.items():
        if key == "links" and isinstance(value, list):
            for link in value:
                if isinstance(link, dict):
                    walk(link.get("seconds"), f"link {link.get('kind')} {link.get('bytes')} B")
        elif key not in SPEED_KEYS and key not in ("world", "cores", "threads"):
            walk(value, key)
    return figures


def unsteady_figures(records: list[dict[str, Any]], top: int = 6) -> list[tuple[str, float]]:
    """The figures the fresh measurements disagree on by more than UNSTEADY_FIELDS (max / min), the
    widest first, at most `top`: which microbenchmark moved a plan's prediction between measurements."""
    figures = [measured_figures(r) for r in records]
    shared = set.intersection(*(set(f) for f in figures)) if figures else set()
    ratios = [(name, max(f[name] for f in figures) / min(f[name] for f in figures)) for name in shared]
    return sorted((r for r in ratios if r[1] > UNSTEADY_FIELDS), key=lambda r: (-r[1], r[0]))[:top]


GROUPS = (
    "device",
    "compute",
    "links",
    "host.block_s",
    "host.collective_s",
    "host.optimizer_s",
    "host.busy_send_s",
)
"""The record's figures by what measured them (runtime/microbench.py, microbench_host.py): the GEMM and
memory rates, the layer passes, the gloo links, and the host costs of DTensor/FSDP2 blocks, library
collectives, the optimizer loop and a busy sender."""


def _predicted_s(data: dict[str, Any], record: dict[str, Any]) -> float:
    """The plan's step time on `record`'s profile (as `plancast simulate` builds it: local_profile.py)."""
    s = parse_scenario(data).scenario
    cluster, _ = profile_cluster(s, record)
    return float(simulate(s.model_copy(update={"cluster": cluster}), events=False).summary["step_time_s"])


def _swapped(record: dict[str, Any], other: dict[str, Any], group: str) -> dict[str, Any] | None:
    """`record` with `group` (a dotted path) taken from `other`, None where either lacks it."""
    result = copy.deepcopy(record)
    target, source = result, other
    *parents, leaf = group.split(".")
    for key in parents:
        if not isinstance(target.get(key), dict) or not isinstance(source.get(key), dict):
            return None
        target, source = target[key], source[key]
    if leaf not in target or leaf not in source:
        return None
    target[leaf] = copy.deepcopy(source[leaf])
    return result


def moved_by(data: dict[str, Any], records: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Per GROUPS entry, how far the plan's prediction moves from the median measurement's when that
    group alone is taken from each other measurement: (group, lowest, highest change), widest first."""
    predicted = [_predicted_s(data, r) for r in records]
    middle = predicted.index(statistics.median_low(predicted))
    moves = []
    for group in GROUPS:
        changes = [
            _predicted_s(data, swapped) / predicted[middle] - 1
            for i, other in enumerate(records)
            if i != middle and (swapped := _swapped(records[middle], other, group)) is not None
        ]
        if changes:
            moves.append((group, min(changes), max(changes)))
    return sorted(moves, key=lambda m: -max(abs(m[1]), abs(m[2])))


def record_notes(records: list[dict[str, Any]], plans: dict[str, dict[str, Any]]) -> list[str]:
    """Lines for the report: the figures the measurements disagree on, and per plan the group that
    moves its prediction most between them (nothing for a single measurement)."""
    if len(records) < 2:
        return []
    unsteady = unsteady_figures(records)
    lines = [
        f"the {len(records)} measurements of the machine disagree most in: "
        + (", ".join(f"{name} x{ratio:.2f}" for name, ratio in unsteady) or "nothing beyond 25%")
    ]
    for name, data in plans.items():
        group, low, high = moved_by(data, records)[0]
        lines.append(
            f"  {name}: moved most by {group} ({low:+.0%} to {high:+.0%} of the median measurement's "
            "prediction, that group alone taken from each other measurement)"
        )
    return lines
