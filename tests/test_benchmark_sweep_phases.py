"""benchmarks/sweep_phases.py: each phase of a real sweep timed and counted, the search left as it was."""

from __future__ import annotations

import pytest

from benchmarks import sweep_phases
from plancast.simulator import sweep_frontier
from tests.cli_runner import REPO


def test_each_phase_of_a_small_sweep_is_timed_and_counted_and_the_search_restored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    opening, bounding = sweep_frontier.Frontier._open, sweep_frontier.Frontier._open_family
    sweep_phases.main([str(REPO / "examples" / "tiny-moe-cpu.toml"), "--gpus", "8", "--workers", "1"])
    out = capsys.readouterr().out
    rows = {
        " ".join(line.split()[:-3]): line.split()[-3:]
        for line in out.splitlines()
        if line.startswith(("map:", "main:"))
    }
    main, pool = ("open families", "open groups"), ("_group_tp_degree", "_replayed", "_simulated")
    assert set(rows) == {f"main: {name}" for name in main} | {f"map: {name}" for name in pool}
    assert int(rows["map: _simulated"][2].replace(",", "")) >= 10  # the top 10 and more were simulated
    assert "16,704 enumerated" in out and "simulated" in out
    assert sweep_frontier.Frontier._open is opening
    assert sweep_frontier.Frontier._open_family is bounding
