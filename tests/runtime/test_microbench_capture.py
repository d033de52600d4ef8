"""The microbenchmarks of library-collective blocks run under the capture their runs are measured with."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from plancast.runtime.microbench_host import instrumented


def test_library_collective_blocks_are_measured_under_the_runs_dispatch_capture() -> None:
    seen = []

    def fn() -> None:
        seen.append(type(_get_current_dispatch_mode()).__name__)
        torch.ones(2).sum()

    assert _get_current_dispatch_mode() is None
    instrumented(fn)()
    assert seen == ["CollectiveSpy"]
    assert _get_current_dispatch_mode() is None  # left again after the sample
