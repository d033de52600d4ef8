"""runtime/schedstat.py against the real kernel: a thread that shares its core with a busy process
waits on the run queue, and the reading says so."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from plancast.runtime.schedstat import core_wait_s, this_thread_times, thread_times

pytestmark = pytest.mark.skipif(thread_times() is None, reason="no per-thread schedstat (not Linux)")


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture
def one_core() -> Iterator[int]:
    """This thread pinned to one core (restored after)."""
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    yield core
    os.sched_setaffinity(0, before)


def test_sharing_a_core_with_a_busy_process_is_counted_as_wait(one_core: int) -> None:
    """This thread's own reading: the process's sum over threads (core_wait_s, thread_times) loses what
    a thread that ends meanwhile had counted (a pytest worker's other threads come and go: a CI run saw
    the sum's CPU time fall by 20 ms across this test), so only the sum's floor is checked on it."""
    used = this_thread_times()
    assert used is not None
    spin(0.1)  # alone on the core
    alone = this_thread_times()
    assert alone is not None
    pid = os.fork()
    if pid == 0:  # the competitor, on the same core (it inherits the affinity)
        spin(0.6)
        os._exit(0)
    try:
        spin(0.4)  # both runnable on one core: each gets about half of it
    finally:
        os.waitpid(pid, 0)
    shared = this_thread_times()
    assert shared is not None
    assert shared.wait_s - alone.wait_s > 0.05  # ~0.2 s of the 0.4 s waited for the core; alone, ~0
    assert shared.cpu_s > used.cpu_s
    process = core_wait_s()  # every thread's wait, this one's among them, read after it
    assert process is not None and process >= shared.wait_s


def test_a_prefix_no_thread_has_reads_zero() -> None:
    assert thread_times("no-such-thread-name") == (0.0, 0.0)


def test_the_calling_threads_own_times_grow_with_its_work() -> None:
    """20 ms of this thread's CPU time (however long the machine's load makes it take) shows in its
    schedstat, which counts the same clock."""
    before = this_thread_times()
    start = time.thread_time()
    while time.thread_time() - start < 0.02:
        pass
    after = this_thread_times()
    assert before is not None and after is not None
    assert after.cpu_s - before.cpu_s >= 0.015 and after.wait_s >= before.wait_s
