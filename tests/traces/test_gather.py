"""`plancast gather`: the folders of a run whose nodes shared no file system become one run directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from plancast.traces.store import RunDir
from tests.cli_runner import cli_main
from tests.dashboard.dashboard_runs import build_run


def split_by_node(tmp_path: Path) -> tuple[Path, Path]:
    """A measured two-rank run, as two nodes would leave it: node 0 has rank 0, the scenario, env.json and
    the summary; node 1 only rank 1 and its log."""
    whole = build_run(tmp_path / "whole")
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    shutil.copytree(whole, node0, ignore=shutil.ignore_patterns("rank-00001.*", "predicted"))
    (node1 / "measured").mkdir(parents=True)
    (node1 / "logs").mkdir()
    shutil.copy(RunDir(whole).rank_events(1), node1 / "measured")
    (node1 / "logs" / "rank-00001.log").write_text("plancast: step 1/4\n")
    return node0, node1


def test_gather_completes_node_0s_run_and_compare_reads_it(tmp_path: Path) -> None:
    node0, node1 = split_by_node(tmp_path)
    code, stdout, stderr = cli_main("gather", str(node0), str(node1))
    assert code == 0, stderr
    assert "ranks 0..1" in stdout and "missing" not in stdout
    assert sorted(RunDir(node0).rank_files()) == [0, 1]
    assert (node0 / "logs" / "rank-00001.log").read_text() == "plancast: step 1/4\n"
    code, _, stderr = cli_main("compare", str(node0))
    assert code == 0, stderr


def test_gather_says_which_ranks_are_still_missing(tmp_path: Path) -> None:
    node0, _ = split_by_node(tmp_path)
    (tmp_path / "empty").mkdir()
    code, stdout, _ = cli_main("gather", str(tmp_path / "new"), str(node0))
    assert code == 2 and "still missing ranks [1]" in stdout


def test_a_file_two_nodes_wrote_differently_is_refused_and_nothing_is_overwritten(tmp_path: Path) -> None:
    node0, node1 = split_by_node(tmp_path)
    (node1 / "measured" / "env.json").write_text('{"world_size": 3}')
    before = (node0 / "measured" / "env.json").read_bytes()
    code, _, stderr = cli_main("gather", str(tmp_path / "merged"), str(node0), str(node1))
    assert code == 2 and "measured/env.json differs between" in stderr, stderr
    assert not (tmp_path / "merged" / "measured").exists()  # refused before anything was copied
    assert (node0 / "measured" / "env.json").read_bytes() == before


@pytest.mark.parametrize("damage", ["symlink", "not a rank file"])
def test_links_and_damaged_rank_files_are_not_taken(tmp_path: Path, damage: str) -> None:
    node0, node1 = split_by_node(tmp_path)
    rank1 = node1 / "measured" / "rank-00001.parquet"
    if damage == "symlink":
        outside = tmp_path / "outside.parquet"
        rank1.rename(outside)
        rank1.symlink_to(outside)
        code, stdout, _ = cli_main("gather", str(node0), str(node1))
        assert code == 2 and "still missing ranks [1]" in stdout  # the link was not followed
        assert not RunDir(node0).rank_events(1).exists()
    else:
        rank1.write_bytes(b"not parquet")
        code, _, stderr = cli_main("gather", str(node0), str(node1))
        assert code == 2 and "is not a readable rank file" in stderr, stderr
