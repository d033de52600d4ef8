"""A node's CPU cores shared by more runnable threads than there are cores (the local machine's ranks
and their transport threads): processor sharing, the way Linux's scheduler shares them.

CFS "models an 'ideal, precise multi-tasking CPU' on real hardware": with n runnable tasks each runs at
1/n of a core's speed (Documentation/scheduler/sched-design-CFS.rst, section 1); EEVDF, its successor
since Linux 6.6, keeps that fair share and adds deadlines (Documentation/scheduler/sched-eevdf.rst).
With several cores the load balancer spreads the tasks, so each of n tasks on c cores runs at
min(1, c / n) of a core. Over a step this is what the machine does, where a first-come-first-served
queue would let the first arrivals run to completion; within a slice a running task keeps its core,
which pipeline.slice_wait_s adds for a thread woken on a saturated node. Spans record a job's start
and end, so a shared pass lasts longer than its work, as measured on the machine."""

from __future__ import annotations

from dataclasses import dataclass

import simpy

_EPS_S = 1e-9  # work below a nanosecond is done: the float residue of the shares


@dataclass(slots=True)
class _Job:
    left_s: float
    """Work left, in seconds of one whole core."""
    done: simpy.Event | None


class SharedCores:
    """`cores` cores shared by the jobs running on them; `run` adds one, whose event fires when its work
    is done."""

    def __init__(self, env: simpy.Environment, cores: int) -> None:
        self.env = env
        self.cores = cores
        self.jobs: list[_Job] = []
        self._since = env.now
        self._generation = 0

    def run(self, seconds: float, notify: bool = True) -> simpy.Event | None:
        """Start a job of `seconds` of one core's work; its completion event (None without `notify`:
        a transport thread nobody waits for)."""
        self._advance()
        done = self.env.event() if notify else None
        self.jobs.append(_Job(seconds, done))
        self._plan_next()
        return done

    def _rate(self) -> float:
        """The share of a core each job runs at now."""
        return min(1.0, self.cores / len(self.jobs)) if self.jobs else 1.0

    def _advance(self) -> None:
        """Take the work done since the last change off every job."""
        now = self.env.now
        elapsed = now - self._since
        self._since = now
        if elapsed > 0 and self.jobs:
            rate = self._rate()
            for job in self.jobs:
                job.left_s -= elapsed * rate

    def _plan_next(self) -> None:
        """Finish the jobs done by now, and wake up when the next one will be."""
        finished = [job for job in self.jobs if job.left_s <= _EPS_S]
        if finished:
            self.jobs = [job for job in self.jobs if job.left_s > _EPS_S]
            for job in finished:
                if job.done is not None:
                    job.done.succeed()
        self._generation += 1
        if not self.jobs:
            return
        soonest = min(job.left_s for job in self.jobs)
        wake = self.env.timeout(soonest / self._rate())
        generation = self._generation
        wake.callbacks.append(lambda _: self._on_wake(generation))

    def _on_wake(self, generation: int) -> None:
        if generation != self._generation:  # a job came or went since: a newer wake-up stands
            return
        self._advance()
        self._plan_next()
