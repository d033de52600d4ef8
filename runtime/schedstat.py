"""This process's threads' time on a CPU and time waiting for one, from Linux's per-thread schedstat.

``/proc/self/task/TID/schedstat`` holds three numbers: time spent on the CPU (ns), time spent waiting
on a run queue (ns) and the number of time slices run (Documentation/scheduler/sched-stats.rst, "/proc
/<pid>/schedstat"). The wait is the time a thread was ready to run and no core ran it: on a machine
whose ranks share the cores (this project's 2-core CI machine), or whose cores other work holds, it is
time the simulator's prediction does not contain unless the plan shares cores by design
(cluster.compute_slots_per_node). The runtime records it per step (worker.run_steps) so that a
measured step longer than predicted shows how much of it the ranks spent waiting for a core."""

from __future__ import annotations

import os
from typing import NamedTuple

_TASKS = "/proc/self/task"


class ThreadTimes(NamedTuple):
    """Seconds so far, summed over the threads counted."""

    cpu_s: float
    wait_s: float


def thread_times(name_prefix: str = "") -> ThreadTimes | None:
    """CPU and run-queue wait of this process's threads whose name starts with `name_prefix` (all
    threads by default; gloo's TCP event loops are ``gloo_tcp_loop``); None where /proc has no
    schedstat (not Linux, or a kernel without CONFIG_SCHED_INFO)."""
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return None
    cpu = wait = 0
    found = False
    for tid in tasks:
        try:
            if name_prefix:
                with open(f"{_TASKS}/{tid}/comm") as comm:
                    if not comm.read().startswith(name_prefix):
                        continue
            with open(f"{_TASKS}/{tid}/schedstat") as stat:
                fields = stat.read().split()
            cpu, wait, found = cpu + int(fields[0]), wait + int(fields[1]), True
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile, or no schedstat
            continue
    if not found and not name_prefix:
        return None
    return ThreadTimes(cpu * 1e-9, wait * 1e-9)


def core_wait_s() -> float | None:
    """Run-queue wait so far of all this process's threads, seconds; None where unavailable."""
    times = thread_times()
    return None if times is None else times.wait_s


def this_thread_times() -> ThreadTimes | None:
    """CPU and run-queue wait of the calling thread alone (the rank's compute thread: one intra-op
    thread on CPU, worker.select_device); None where /proc has no schedstat."""
    import threading

    try:
        with open(f"{_TASKS}/{threading.get_native_id()}/schedstat") as stat:
            fields = stat.read().split()
        return ThreadTimes(int(fields[0]) * 1e-9, int(fields[1]) * 1e-9)
    except (OSError, ValueError, IndexError):
        return None
