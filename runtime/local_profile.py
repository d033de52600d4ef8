"""The measured `local-cpu` machine: microbenchmarks run once per machine and scenario shape, cached.

The cache holds measurements (runtime/microbench.py's dict as JSON), not fits: the profile is derived
from them on every use (plancast.simulator.calibration.microbench.profile_cluster), so a newer
plancast reads an older cache correctly. Location: $PLANCAST_CACHE_DIR, else the user's cache
directory (platformdirs: ~/.cache/plancast on Linux); one folder per machine, keyed by hostname, CPU
model, core count and torch version; one file per scenario shape (model sizes, sequence, micro-batch,
dtype, ranks), since the microbenchmarks run at the scenario's GEMM shapes and rank count.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plancast.simulator.calibration.microbench import core_share, profile_cluster
from plancast.simulator.cluster import Cluster
from plancast.simulator.scenario import Scenario
from plancast.traces.contention import probe_or_none

CACHE_ENV = "PLANCAST_CACHE_DIR"
MAX_RANKS = 4  # microbenchmark ranks on one machine (tests and small machines: 2-4 gloo processes)


def cache_dir() -> Path:
    """$PLANCAST_CACHE_DIR, else platformdirs' user cache directory for plancast."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("plancast", appauthor=False))


RECORD_VERSION = 8
"""Bumped when the microbenchmarks measure something new (2: the busy-sender transfer; 3: with every
rank busy, in pairs; 4: a transfer's post as the runtime posts it; 5: the executor's host time per
transfer, which replaces it; 6: the transport threads' CPU, GEMMs sampled in turns; 7: interquartile
means of 11 samples instead of medians of 7, and the load measured under; 8: the speed probe,
runtime/microbench_probe.py), so that a cached record without it is measured again rather than read
as zero."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:60]


def machine_key() -> str:
    """hostname, CPU model, core count and torch version: what the measurements depend on."""
    import torch

    from plancast.runtime.microbench import cores, cpu_model

    parts = [socket.gethostname(), cpu_model(), f"{cores()}cores", f"torch{torch.__version__}"]
    return "_".join(_slug(p) for p in parts)


def shape_key(s: Scenario) -> str:
    """What the microbenchmarks' results depend on in the scenario (sizes, dtype, ranks)."""
    m, t = s.model, s.training
    shape = [
        m.hidden_size,
        m.ffn_size,
        m.num_attention_heads,
        m.kv_heads,
        m.vocab_size,
        m.activation,
        m.norm,
        m.position_embedding,
        t.seq_len,
        t.micro_batch_size,
        t.dtype,
        bench_world(s),
        RECORD_VERSION,
    ]
    digest = hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:12]
    return f"h{m.hidden_size}-s{t.seq_len}-b{t.micro_batch_size}-r{bench_world(s)}-{digest}"


def bench_world(s: Scenario) -> int:
    """Ranks of the microbenchmark job: the scenario's ranks on this node, 2..MAX_RANKS, lowered to a
    count its tensor-parallel block microbenchmark can split the model over (heads, KV heads and MLP
    width; e.g. 3 ranks of a 4-head model measure with 2)."""
    m = s.model
    world = max(2, min(s.cluster.gpus_per_node, MAX_RANKS))
    while world > 2 and any(n % world for n in (m.num_attention_heads, m.kv_heads, m.ffn_size)):
        world -= 1
    return world


def record_path(s: Scenario) -> Path:
    return cache_dir() / machine_key() / f"{shape_key(s)}.json"


def measured_cluster(
    s: Scenario, *, refresh: bool = False, say: Callable[[str], None] = lambda _: None
) -> tuple[Cluster, list[str]]:
    """`s`'s local-cpu cluster as measured on this machine (from the cache, or measured and cached now:
    then `say` gets one line). Returns the cluster and the profile's notes."""
    path = record_path(s)
    record: dict[str, Any] | None = None
    if path.is_file() and not refresh:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            record = None  # a damaged cache entry is measured again
    if record is None:
        from plancast.runtime.microbench import measure

        started, load_before = time.perf_counter(), machine_load()
        record = measure(s, world=bench_world(s))
        record["load_before"] = load_before  # what else ran: the load the profile was measured under
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        tmp.replace(path)
        say(
            f"local-cpu: measured this machine ({time.perf_counter() - started:.0f} s of microbenchmarks, "
            f"{record['world']} ranks); cached in {path} (refresh with --no-cache)"
        )
    else:
        then = record.get("load_before")
        note = load_changed(then, machine_load(), record.get("cores"), record.get("world"))
        if note:
            say(f"local-cpu: {note}; the cached profile {path} may not fit now (re-measure with --no-cache)")
    return profile_cluster(s, record)


LOAD_SHARE_CHANGE = 0.8
"""Told when the core share the load leaves the ranks now is below 0.8 of, or above 1/0.8 of, the one
it left while the profile was measured: the loop's 25% target (traces/contention.BUSY_SHARE)."""


def machine_load() -> float | None:
    """The 1-minute load average (runnable threads, Linux /proc/loadavg via os.getloadavg); None
    where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def expected_share(load: float, cores: int, ranks: int) -> float:
    """The core share `ranks` busy ranks can expect beside `load` other runnable threads on `cores`
    cores, the scheduler sharing the cores evenly among all runnable threads (Linux CFS's fair share,
    Documentation/scheduler/sched-design-CFS.rst)."""
    return min(1.0, cores / max(load + ranks, 1e-9))


def load_changed(then: object, now: float | None, cores: object, ranks: object = 2) -> str | None:
    """A sentence when the load now leaves the ranks a core share that differs from the one at the
    profile's measurement by more than LOAD_SHARE_CHANGE, else None (also where either load is unknown:
    records before this one kept none)."""
    if now is None or isinstance(then, bool) or not isinstance(then, int | float):
        return None
    n_cores = cores if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0 else 1
    n_ranks = ranks if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks > 0 else 2
    share_then, share_now = expected_share(then, n_cores, n_ranks), expected_share(now, n_cores, n_ranks)
    if LOAD_SHARE_CHANGE <= share_now / share_then <= 1 / LOAD_SHARE_CHANGE:
        return None
    return (
        f"this machine's load is {now:.1f} now and was {then:.1f} when its profile was measured "
        f"({n_cores} cores, {n_ranks} ranks: a core share of {share_now:.2f} now against {share_then:.2f}), "
        "and the profile's speeds are those of that load"
    )


def localize(s: Scenario, *, refresh: bool = False, say: Callable[[str], None] = lambda _: None) -> Scenario:
    """`s` with its (local-cpu) cluster measured on this machine."""
    cluster, _ = measured_cluster(s, refresh=refresh, say=say)
    return s.model_copy(update={"cluster": cluster})


def cached_core_share(s: Scenario) -> float:
    """The core share a rank got during this machine's microbenchmarks at `s`'s shapes, else during its
    latest ones (the share is the machine's load, not the shape's); 1.0 without a record. What the
    host-cost bounds of a profile from that record are scaled by (calibration.microbench.bounded)."""
    path = record_path(s)
    folder = path.parent
    others = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    for candidate in [path, *reversed(others)]:
        try:
            return core_share(json.loads(candidate.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError):
            continue
    return 1.0


MAX_RECORD_BYTES = 4 << 20  # a record is tens of KiB; a larger file in the cache is not one


def _host_records(name: str = "*.json") -> list[Path]:
    """This host's cached records named `name` (any torch version, CPU model and core count folder),
    oldest first. Torch-free (machine_key imports torch, seconds on a busy machine)."""
    root = cache_dir()
    if not root.is_dir():
        return []
    folders = [d for d in root.glob(f"{_slug(socket.gethostname())}_*") if d.is_dir()]
    return sorted((p for d in folders for p in d.glob(name) if p.is_file()), key=lambda p: p.stat().st_mtime)


def _newest_record(paths: list[Path]) -> dict[str, Any] | None:
    """The newest readable record of `paths` (oldest first), None if none is one."""
    for candidate in reversed(paths):
        if candidate.stat().st_size > MAX_RECORD_BYTES:
            continue
        try:
            record = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, ValueError):
            continue
        if isinstance(record, dict):
            return record
    return None


def latest_host_record() -> dict[str, Any] | None:
    """This host's latest microbenchmark record (any scenario shape: its core share and speed probe are
    the machine's, not the shape's), None without one. Torch-free, for `plancast compare`
    (traces/contention.py's references)."""
    return _newest_record(_host_records())


def host_record_for(s: Scenario) -> dict[str, Any] | None:
    """The record a prediction of `s` on this machine is read from (`record_path`: its shapes' record,
    the newest if several torch versions measured them), else this host's latest: the core share and
    speed probe that prediction's constants were measured at. The latest record may be another
    shape's, measured at another moment under another load and speed (a demo's tiny model measured
    after the user's own scenario). Torch-free."""
    return _newest_record(_host_records(f"{shape_key(s)}.json")) or latest_host_record()


def record_reference(record: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """The core share and speed probe (``probe_s``, ``workload``) a profile from `record` was measured
    at, as `plancast compare` applies them (traces/contention.py).

    With a speed probe: its wall time at a share of 1. The microbenchmarks time single calls in wall
    time and keep their interquartile mean (runtime/timing.py), so a busy machine stretches them, but
    not by 1 / its core share (a call that finishes within its scheduler slice is not stretched); the
    probe's kernels, sampled in turns with the compute microbenchmark by the same statistic, are
    stretched alike, by the load and by the machine's speed together. (Issue 36, this project's 2-core
    VM at load 1-4: a measurement at core share 0.26 predicted dp 2 at 0.17 s, one at 0.34 at 0.14 s,
    and the run, at 0.56, took 0.11 s; scaled by the shares, 0.17 x 0.26 / 0.56, the first read -29%:
    its samples were stretched far less than 1 / 0.26. At load 5-7 the shares scaled two of three
    measurements to within 9% and the third to -55%: docs/accuracy.md.) Without one (records from
    before the probe): the record's core share and no probe."""
    probe = record.get("speed_probe")
    wall_s = probe_or_none(probe.get("probe_wall_s")) if isinstance(probe, dict) else None
    if isinstance(probe, dict) and wall_s is not None:
        return 1.0, {"probe_s": wall_s, "workload": probe.get("workload")}
    return core_share(record), None
