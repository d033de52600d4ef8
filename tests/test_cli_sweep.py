"""`plancast sweep` through the CLI: the ranked table, the JSON object, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import cli_main

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "tiny-local-cpu.toml")


def test_sweep_prints_counts_then_the_ranked_plans() -> None:
    code, out, _ = cli_main("sweep", EXAMPLE, "--gpus", "2", "--top", "3", "--finalists", "4")
    assert code == 0
    lines = out.splitlines()
    assert "plans enumerated" in lines[0] and "simulated in full" in lines[0]
    assert "fit on the first pipeline rank" in lines[0]  # the memory check's lower bound, not the peak
    assert "step s" in out and "MFU" in out
    ranked = [line for line in lines if line.lstrip("│ ").startswith(("1 ", "2 ", "3 "))]
    assert len(ranked) == 3, out


def test_sweep_json_has_the_same_plans() -> None:
    code, out, _ = cli_main("sweep", EXAMPLE, "--gpus", "2", "--top", "3", "--finalists", "4", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["plans_enumerated"] >= data["plans_fitting"] >= len(data["plans"]) > 0
    assert len(data["plans"]) <= 3


def test_a_sweep_where_nothing_fits_exits_1_with_and_without_json() -> None:
    """docs/cli.md's exit code 1 holds for scripts too: the JSON (its empty list) and then exit 1, for one
    size and for several; the skip lines name the limit asked for, not the GPU's memory."""
    for gpus in ("2", "2,4"):
        code, out, err = cli_main("sweep", EXAMPLE, "--gpus", gpus, "--max-memory-gib", "0.001", "--json")
        assert code == 1, (gpus, err)
        data = json.loads(out)
        assert data["plans"] == [] and data["plans_fitting"] == 0 and data["plans_enumerated"] > 0
        assert {"plans_enumerated", "plans_fitting", "seconds", "plans"} <= set(data)  # both JSON shapes
        assert "fits" in err and "8 GiB" not in err and "Traceback" not in err
        code, out, err = cli_main("sweep", EXAMPLE, "--gpus", gpus, "--max-memory-gib", "0.001")
        assert code == 1 and "fits" in err


@pytest.mark.parametrize(
    ("flag", "value"), [("--top", "0"), ("--top", "-1"), ("--finalists", "0"), ("--finalists", "-1")]
)
def test_sweep_refuses_a_non_positive_count_by_its_flag(flag: str, value: str) -> None:
    """--finalists -1 printed 'no plan fits' and exit 1 (false), --top 0 printed nothing with exit 0."""
    code, out, err = cli_main("sweep", EXAMPLE, "--gpus", "2", flag, value)
    assert code == 2 and flag in err and "Traceback" not in out + err, err


def test_sweep_refuses_a_non_positive_gpu_count() -> None:
    code, out, err = cli_main("sweep", EXAMPLE, "--gpus", "0")
    assert code == 2
    assert "--gpus" in err and "must be positive" in err and "Traceback" not in err + out


def test_sweep_ranks_expert_parallel_plans_for_mixtral() -> None:
    """On 16 H100s the sweep searches ep for Mixtral 8x7B and ranks those plans beside ZeRO-3 without ep
    (experts sharded over dp, which fits since the expert states shard past ep); every plan it prints
    fits, and an ep plan is among the best few."""
    mixtral = str(Path(__file__).parents[1] / "examples" / "mixtral-8x7b-dgx-h100.toml")
    code, out, err = cli_main("sweep", mixtral, "--gpus", "16", "--json", "--top", "6", "--finalists", "6")
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert plans and any(p["ep"] > 1 for p in plans)
    # ep is carved out of dp, or spans tp x dp on the folded expert grid (etp > 0)
    assert all((p["etp"] or p["dp"] % p["ep"] == 0) and 8 % p["ep"] == 0 for p in plans)
    assert [p["step_time_s"] for p in plans] == sorted(p["step_time_s"] for p in plans)
    assert all(p["peak_memory_gib"] <= 80 for p in plans)


def test_sweep_searches_context_parallel_on_long_sequences(tmp_path: Path) -> None:
    """At 128k tokens a dense 8B model needs its sequence split: the top plans use cp > 1."""
    llama = str(Path(__file__).parents[1] / "examples" / "llama3-8b-cp4-128k.toml")
    code, out, err = cli_main("sweep", llama, "--gpus", "8", "--json", "--top", "3", "--finalists", "4")
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert plans and all(p["cp"] > 1 for p in plans)


def test_sweep_without_gpus_plans_for_the_scenarios_cluster_and_says_so() -> None:
    code, out, err = cli_main("sweep", EXAMPLE, "--top", "2", "--finalists", "2", "--json")
    given = cli_main("sweep", EXAMPLE, "--gpus", "2", "--top", "2", "--finalists", "2", "--json")
    assert code == 0 and given[0] == 0, err
    assert "--gpus not given: the scenario's cluster, 2 GPUs (1 node x 2)" in err
    assert json.loads(out)["plans"] == json.loads(given[1])["plans"]
