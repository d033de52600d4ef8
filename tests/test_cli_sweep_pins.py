"""`plancast sweep --pin AXIS=VALUE`: a pinned axis holds its value in every plan returned, and a pin that
is not an axis, not a value of it, or leaves no plan is named in the message."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate
from tests.cli_runner import cli_main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TINY = str(EXAMPLES / "tiny-local-cpu.toml")
MIXTRAL = str(EXAMPLES / "mixtral-8x7b-dgx-h100.toml")


def plans(*args: str) -> list[dict[str, object]]:
    code, out, err = cli_main("sweep", *args, "--json", "--workers=1")
    assert code == 0, err
    found: list[dict[str, object]] = json.loads(out)["plans"]
    assert found
    return found


def test_pinned_axes_hold_in_every_plan() -> None:
    got = plans(TINY, "--gpus", "2", "--top", "4", "--pin", "zero=0,1", "--pin", "recompute=none")
    assert {p["zero_stage"] for p in got} <= {0, 1} and {p["recompute"] for p in got} == {"none"}
    every = plans(TINY, "--gpus", "2", "--top", "40")
    assert {p["zero_stage"] for p in every} - {0, 1}  # unpinned, the search ranks other stages too


def test_mixtral_pinned_to_deepep_with_overlap() -> None:
    """H100 nodes joined by InfiniBand run DeepEP: pinned, every plan has ep 8, deepep and overlap."""
    got = plans(
        MIXTRAL, "--gpus", "16", "--top", "3", "--pin", "ep=8", "--pin", "dispatcher=deepep",
        "--pin", "overlap=true",
    )  # fmt: skip
    assert all((p["ep"], p["dispatcher"], p["overlap_ep"]) == (8, "deepep", True) for p in got)
    assert all("deepep overlap" in str(p["plan"]) for p in got)


@pytest.mark.parametrize(
    ("pin", "named"),
    [
        ("bogus=1", "AXIS one of"),
        ("pp", "AXIS=VALUE"),
        ("dispatcher=nccl", "alltoall, allgather, deepep, hybridep"),
        ("overlap=maybe", "true or false"),
        ("tp=two", "whole number"),
    ],
)
def test_a_bad_pin_exits_2_naming_it(pin: str, named: str) -> None:
    code, out, err = cli_main("sweep", TINY, "--gpus", "2", "--pin", pin)
    assert code == 2 and "--pin" in err and named in err and "Traceback" not in out + err, err


def test_a_pin_that_leaves_no_plan_is_named() -> None:
    code, _, err = cli_main("sweep", TINY, "--gpus", "2", "--pin", "pp=3")
    assert code == 1 and "no plan with --pin pp=3" in err, err


def test_each_ranked_plan_carries_what_validate_warns_about_it(tmp_path: Path) -> None:
    """Megatron-Core refuses EP overlap on a pipeline that is not interleaved: a sweep pinned there still
    ranks those plans by time, and each row names the refusal (JSON, and under the table); the same plans
    without overlap carry none of it."""
    scenario = tmp_path / "moe.toml"
    scenario.write_text(
        '[model]\npreset = "tiny-moe"\n[training]\nseq_len = 64\nglobal_batch_size = 32\n'
        '[parallelism]\nframework = "megatron-lm"\n[cluster]\npreset = "dgx-a100-80gb"\nnum_nodes = 1\n'
    )
    pins = ["--gpus", "8", "--top", "3", "--pin", "pp=2", "--pin", "schedule=1F1B", "--pin", "ep=2"]

    def warned(overlap: str) -> list[str]:
        found = plans(str(scenario), *pins, "--pin", f"overlap={overlap}")
        return [" | ".join(p["warnings"]) for p in found]  # type: ignore[arg-type]

    assert all("Megatron-Core refuses it with a pipeline" in w for w in warned("true"))
    assert not any("moe_overlap_ep_comm" in w for w in warned("false"))
    code, out, err = cli_main("sweep", str(scenario), *pins, "--pin", "overlap=true", "--workers=1")
    assert code == 0, err
    assert "#1-#3: parallelism.moe_overlap_ep_comm under framework megatron-lm" in out  # one line, 3 ranks
    sizes = [a if a != "8" else "4,8" for a in pins]  # several sizes: the cluster search's rows too
    across = plans(str(scenario), *sizes, "--pin", "overlap=true")
    assert {p["gpus"] for p in across} == {4, 8}
    assert all(any("Megatron-Core refuses it" in w for w in p["warnings"]) for p in across)  # type: ignore[attr-defined]


def test_runnable_keeps_to_what_the_framework_runs(tmp_path: Path) -> None:
    """`--runnable`: the same pinned pipeline as above ranks no plan Megatron-Core refuses (overlap goes
    off), and no plan carries a framework warning; a pinned schedule the framework does not ship is bad
    input, exit 2, naming the ones it runs."""
    scenario = tmp_path / "moe.toml"
    scenario.write_text(
        '[model]\npreset = "tiny-moe"\n[training]\nseq_len = 64\nglobal_batch_size = 32\n'
        '[parallelism]\nframework = "megatron-lm"\n[cluster]\npreset = "dgx-a100-80gb"\nnum_nodes = 1\n'
    )
    pins = ["--gpus", "8", "--top", "5", "--pin", "pp=2", "--pin", "ep=2"]
    every = plans(str(scenario), *pins)

    def refused(found: list[dict[str, object]]) -> list[str]:
        said = [w for p in found for w in p["warnings"]]  # type: ignore[attr-defined]
        return [w for w in said if "does not ship" in w or "Megatron-Core refuses" in w]

    assert refused(every)  # without it, plans the framework refuses rank among the best
    kept = plans(str(scenario), *pins, "--runnable")
    assert not refused(kept), refused(kept)
    assert all(p["schedule"] in ("1F1B", "Interleaved1F1B") for p in kept)
    assert all(not p["overlap_ep"] or p["schedule"] == "Interleaved1F1B" for p in kept)
    code, out, err = cli_main("sweep", str(scenario), *pins, "--pin", "schedule=ZBV", "--runnable")
    assert code == 2 and "runs none of them (it runs 1F1B, Interleaved1F1B)" in err, err
    assert "Traceback" not in out + err


def test_the_output_says_what_was_pinned_and_whether_runnable() -> None:
    """`--json` carries the size, framework, pins as searched (under --runnable the schedules the
    framework ships) and the memory cap; the table's first line names them; neither when none is set."""
    args = [TINY, "--gpus", "4", "--top", "2", "--workers=1", "--pin", "tp=1,2", "--runnable"]
    code, out, err = cli_main("sweep", *args, "--json", "--max-memory-gib", "70")
    assert code == 0, err
    given = json.loads(out)
    assert given["gpus"] == 4 and given["framework"] == "torchtitan" and given["runnable"] is True
    assert given["pins"]["tp"] == [1, 2] and "DualPipeV" in given["pins"]["schedule"]
    assert "ZBH2" not in given["pins"]["schedule"]  # torchtitan does not ship it
    assert given["max_memory_gib"] == 70
    code, out, err = cli_main("sweep", *args)
    assert code == 0, err
    assert "searched with schedule=GPipe,1F1B" in out and "tp=1,2 (--runnable: only plans torchtitan" in out
    code, out, err = cli_main("sweep", TINY, "--gpus", "4,8", "--top", "1", "--workers=1", "--json")
    assert code == 0, err
    across = json.loads(out)
    assert across["gpus"] == [4, 8] and across["pins"] == {} and across["runnable"] is False
    code, out, err = cli_main("sweep", TINY, "--gpus", "4", "--top", "1", "--workers=1")
    assert code == 0 and "searched with" not in out, err


def test_a_plan_takes_its_own_stage_dependent_framework_default(tmp_path: Path) -> None:
    """Megatron-LM overlaps the parameter all-gather at ZeRO 2-3 only (catalog/frameworks.py): a ZeRO-2
    plan searched from a ZeRO-1 scenario that leaves the key unset is priced with it on, as the plan
    written as a scenario of its own (the saved file leaves the key to the loader and simulates at the
    sweep's time); set in the scenario, the key holds for every plan, and the plan is priced slower."""
    base = (
        '[model]\npreset = "tiny-gpt"\n[training]\nseq_len = 64\nglobal_batch_size = 32\n'
        '[cluster]\npreset = "dgx-a100-80gb"\nnum_nodes = 1\n[parallelism]\nframework = "megatron-lm"\n'
        "zero_stage = 1\n"
    )
    times = {}
    for extra, overlapped in (("", True), ("overlap_param_gather = false\n", False)):
        scenario, saved = tmp_path / f"s{overlapped}.toml", tmp_path / f"best{overlapped}.toml"
        scenario.write_text(base + extra)
        code, out, err = cli_main(
            "sweep", str(scenario), "--gpus", "8", "--top", "1", "--pin", "zero=2", "--pin", "pp=4",
            "--json", "--workers=1", "--save-best", str(saved),
        )  # fmt: skip
        assert code == 0, err
        assert "prices every plan with" not in err
        times[overlapped] = float(json.loads(out)["plans"][0]["step_time_s"])
        assert ("overlap_param_gather" in tomllib.loads(saved.read_text())["parallelism"]) is not overlapped
        loaded = load_scenario(saved).scenario
        assert loaded.parallelism.zero_stage == 2 and loaded.parallelism.overlap_param_gather is overlapped
        own = simulate(loaded, events=False).summary["step_time_s"]
        assert abs(own - times[overlapped]) <= 1e-9 * own
    assert times[True] < times[False]
