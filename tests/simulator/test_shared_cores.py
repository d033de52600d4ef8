"""Cores shared by more runnable jobs than cores: processor sharing, as Linux's CFS shares them
(simulator/engine/cores.py), not first come, first served."""

import simpy

from plancast.simulator.engine.cores import SharedCores


def _finish_times(cores: int, jobs: list[tuple[float, float]]) -> list[float]:
    """Each job (start s, work s) on `cores` shared cores: when it ends."""
    env = simpy.Environment()
    shared = SharedCores(env, cores)
    ends: list[float] = [0.0] * len(jobs)

    def job(i: int, start: float, work: float) -> simpy.events.ProcessGenerator:
        yield env.timeout(start)
        done = shared.run(work)
        assert done is not None
        yield done
        ends[i] = env.now

    for i, (start, work) in enumerate(jobs):
        env.process(job(i, start, work))
    env.run()
    return ends


def test_jobs_within_the_cores_run_at_full_speed() -> None:
    assert _finish_times(2, [(0.0, 1.0), (0.0, 2.0)]) == [1.0, 2.0]


def test_more_jobs_than_cores_share_them_equally() -> None:
    # three 1 s jobs on 2 cores: each at 2/3 of a core, all end at 1.5 s (first come, first served
    # would end two at 1 s and the third at 2 s)
    ends = _finish_times(2, [(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)])
    assert [round(e, 9) for e in ends] == [1.5, 1.5, 1.5]


def test_a_job_arriving_slows_the_running_ones() -> None:
    # one core: job A (2 s) alone for 1 s, then B (0.5 s) arrives; both at half speed until B is done
    # at 2 s (its 0.5 s at half speed), then A's last 0.5 s alone: A ends at 2.5 s
    ends = _finish_times(1, [(0.0, 2.0), (1.0, 0.5)])
    assert [round(e, 9) for e in ends] == [2.5, 2.0]


def test_a_job_nobody_waits_for_still_takes_its_share() -> None:
    env = simpy.Environment()
    shared = SharedCores(env, 1)
    assert shared.run(1.0, notify=False) is None  # a transport thread's CPU time
    done = shared.run(1.0)
    assert done is not None
    env.run(until=done)
    assert round(env.now, 9) == 2.0
