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

CACHE_ENV = "PLANCAST_CACHE_DIR"
MAX_RANKS = 4  # microbenchmark ranks on one machine (tests and small machines: 2-4 gloo processes)


def cache_dir() -> Path:
    """$PLANCAST_CACHE_DIR, else platformdirs' user cache directory for plancast."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("plancast", appauthor=False))


RECORD_VERSION = 6
"""Bumped when the microbenchmarks measure something new (2: the busy-sender transfer; 3: with every
rank busy, in pairs; 4: a transfer's post as the runtime posts it; 5: the executor's host time per
transfer, which replaces it; 6: the transport threads' CPU, GEMMs sampled in turns), so
that a cached record without it is measured again rather than read as zero."""


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
        note = load_changed(record.get("load_before"), machine_load(), record.get("cores"))
        if note:
            say(f"local-cpu: {note}; the cached profile {path} may not fit now (re-measure with --no-cache)")
    return profile_cluster(s, record)


LOAD_CHANGE_PER_CORE = 0.5
"""A change of the 1-minute load average by more than half a runnable thread per core: with two ranks
on two cores, a rank's core share then moves by a third or more (2 / 2.5 = 0.8 of a core, and
below), beyond the loop's 25% target (traces/contention.py)."""


def machine_load() -> float | None:
    """The 1-minute load average (runnable threads, Linux /proc/loadavg via os.getloadavg); None
    where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_changed(then: object, now: float | None, cores: object) -> str | None:
    """A sentence when the load now differs from the one the profile was measured under by more than
    LOAD_CHANGE_PER_CORE per core, else None (also where either is unknown: records before this one
    kept no load)."""
    if now is None or isinstance(then, bool) or not isinstance(then, int | float):
        return None
    per_core = max(int(cores), 1) if isinstance(cores, int) and not isinstance(cores, bool) else 1
    if abs(now - then) / per_core <= LOAD_CHANGE_PER_CORE:
        return None
    return (
        f"this machine's load is {now:.1f} now and was {then:.1f} when its profile was measured "
        f"({per_core} cores), and the profile's speeds are those of that load"
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


def latest_host_core_share() -> float:
    """The core share a rank got during this host's latest microbenchmarks (any scenario shape: the share
    is the machine's load), 1.0 without any. Torch-free (machine_key imports torch, seconds on a busy
    machine), for `plancast compare` (traces/contention.py's reference)."""
    root = cache_dir()
    if not root.is_dir():
        return 1.0
    folders = [d for d in root.glob(f"{_slug(socket.gethostname())}_*") if d.is_dir()]
    records = sorted((p for d in folders for p in d.glob("*.json")), key=lambda p: p.stat().st_mtime)
    for candidate in reversed(records):
        if candidate.stat().st_size > MAX_RECORD_BYTES:
            continue
        try:
            return core_share(json.loads(candidate.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, TypeError, ValueError, AttributeError):
            continue
    return 1.0
