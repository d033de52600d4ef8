"""An engine is freed as soon as its caller drops it: no reference cycle keeps a finished step's
spans alive until the next cyclic collection (a sweep runs thousands of steps)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from plancast.simulator.engine import Engine
from plancast.simulator.loader import load_scenario

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_a_finished_engine_is_freed_without_the_cyclic_collector() -> None:
    s = load_scenario(EXAMPLES / "gpt3-175b-dgx-a100.toml").scenario
    assert s.dp > 1  # its ranks run data-parallel streams, which wait for work until the step ends
    enabled = gc.isenabled()
    gc.disable()
    try:
        engine = Engine(s)
        engine.run()
        ref = weakref.ref(engine)
        del engine
        assert ref() is None
    finally:
        if enabled:
            gc.enable()
