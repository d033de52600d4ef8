"""Malformed and absurd scenarios (issue 11): `validate` refuses every one with exit 2 and a message
naming the key, and `simulate` never crashes, hangs or prints NaN on a scenario that validates.

Each case is one fixture row; the property test generates scenarios around the bounds."""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from plancast.simulator import catalog
from plancast.simulator.loader import ScenarioError, load_scenario, parse_scenario
from plancast.simulator.validation import BOUNDS, DEFAULT_BOUND, bound_of, check_bounds
from tests.cli_runner import cli_main

REPO = Path(__file__).resolve().parent.parent
TINY = tomllib.loads((REPO / "examples" / "tiny-local-cpu.toml").read_text())


@dataclass(frozen=True)
class Bad:
    """A scenario TOML (the tiny example with some keys replaced) and the key the error names."""

    id: str
    toml: str
    key: str


def tiny_with(section: str, extra: str) -> str:
    """The tiny example with ``extra`` lines added to ``[section]`` (keys there replaced)."""
    data = json.loads(json.dumps(TINY))
    text = tomli_w.dumps(data)
    header = f"[{section}]\n"
    if header not in text:
        return f"{text}\n{header}{extra}\n"
    return text.replace(header, f"{header}{extra}\n", 1)


def dedupe(text: str) -> str:
    """Keep the first assignment of each key per table (the added line wins over the example's)."""
    seen: set[tuple[str, str]] = set()
    table, out = "", []
    for line in text.splitlines():
        if line.startswith("["):
            table = line
        elif "=" in line:
            key = (table, line.split("=", 1)[0].strip())
            if key in seen:
                continue
            seen.add(key)
        out.append(line)
    return "\n".join(out) + "\n"


CASES = [
    Bad(
        "op-overhead-inf",
        tiny_with("cluster.compute", "op_overhead_us = inf"),
        "cluster.compute.op_overhead_us",
    ),
    Bad(
        "op-overhead-nan",
        tiny_with("cluster.compute", "op_overhead_us = nan"),
        "cluster.compute.op_overhead_us",
    ),
    Bad(
        "latency-inf",
        tiny_with("cluster", "") + '[[cluster.tiers]]\nname = "x"\nbandwidth_GBps = 10.0\nlatency_us = inf\n',
        "cluster.tiers[0].latency_us",
    ),
    Bad(
        "peak-denormal",
        tiny_with("cluster", "") + "[cluster.gpu]\npeak_tflops = 5e-324\nhbm_GBps = 10.0\nmemory_GiB = 8.0\n",
        "cluster.gpu.peak_tflops.fp32",
    ),
    Bad(
        "bucket-1e308",
        tiny_with("parallelism", "ddp_bucket_cap_MiB = 1e308"),
        "parallelism.ddp_bucket_cap_MiB",
    ),
    Bad("bucket-inf", tiny_with("parallelism", "ddp_bucket_cap_MiB = inf"), "parallelism.ddp_bucket_cap_MiB"),
    Bad(
        "matmul-half-1e308",
        tiny_with("cluster.compute", "matmul_half_gflop = 1e308"),
        "cluster.compute.matmul_half_gflop",
    ),
    Bad("layers-2^63", tiny_with("model", f"num_hidden_layers = {2**63 - 1}"), "model.num_hidden_layers"),
    Bad("hidden-huge", tiny_with("model", "hidden_size = 4611686018427387904"), "model.hidden_size"),
    Bad(
        "batch-2e12", tiny_with("training", "global_batch_size = 2000000000000"), "training.global_batch_size"
    ),
    Bad(
        "batch-hangs-engine",
        tiny_with("training", "global_batch_size = 8000000"),
        "training.global_batch_size",
    ),
    Bad("seed-1e23", tiny_with("training", "seed = 100000000000000000000000"), "training.seed"),
    Bad("seed-negative", tiny_with("training", "seed = -1"), "training.seed"),
    Bad("steps-huge", tiny_with("training", "steps = 1000000000000"), "training.steps"),
    Bad("nodes-billion", tiny_with("cluster", "num_nodes = 1000000000"), "cluster.num_nodes"),
    Bad("nested-arrays", tiny_with("training", "x = " + "[" * 5000 + "]" * 5000), ""),
    Bad("not-utf8", "", ""),
    Bad("toml-syntax", "[model\npreset = 1", ""),
]


def write(tmp_path: Path, case: Bad) -> Path:
    path = tmp_path / f"{case.id}.toml"
    if case.id == "not-utf8":
        path.write_bytes(b"\xff\xfe[model]\n\x00\x81")
    else:
        path.write_text(dedupe(case.toml) if case.toml.startswith("[") else case.toml)
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_and_simulate_refuse_with_exit_2(tmp_path: Path, case: Bad) -> None:
    path = write(tmp_path, case)
    for verb in (["validate"], ["simulate"], ["simulate", "--json"]):
        code, out, err = cli_main(*verb, str(path))
        assert code == 2, (verb, out, err)
        assert "Traceback" not in out + err
        assert err.startswith("error: ") and str(path) in err, err
        if case.key:
            assert f"- {case.key}:" in err, err


def test_simulate_out_refused_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, CASES[0])
    code, _, _ = cli_main("simulate", str(path), "--out", str(tmp_path / "run"))
    assert code == 2
    assert not (tmp_path / "run").exists()


def test_every_example_and_preset_lies_inside_the_bounds() -> None:
    for example in sorted((REPO / "examples").glob("*.toml")):
        load_scenario(example)  # raises ScenarioError when outside
    for name, gpu in catalog.GPUS.items():
        for key, value in gpu.items():
            for path, number in _leaves(value, f"cluster.gpu.{key}"):
                low, high, _ = bound_of(path)
                assert low <= number <= high, (name, path, number)
    for name, model in catalog.MODELS.items():
        for key, value in model.items():
            for path, number in _leaves(value, f"model.{key}"):
                low, high, _ = bound_of(path)
                assert low <= number <= high, (name, path, number)


def _leaves(value: Any, path: str) -> list[tuple[str, float]]:
    if isinstance(value, bool | str):
        return []
    if isinstance(value, int | float):
        return [(path, value)]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    return []


def test_the_bounds_table_explains_every_entry() -> None:
    for path, (low, high, why) in {**BOUNDS, "*": DEFAULT_BOUND}.items():
        assert low < high and why, path
        assert all(math.isfinite(x) for x in (low, high)), path


def test_bound_of_falls_back_from_the_key_to_its_table_to_the_default() -> None:
    assert bound_of("cluster.tiers[3].latency_us") == BOUNDS["cluster.tiers[*].latency_us"]
    assert bound_of("cluster.gpu.peak_tflops.fp8") == BOUNDS["cluster.gpu.peak_tflops.*"]
    assert bound_of("cluster.compute.p2p_overhead_us") == BOUNDS["cluster.compute.*"]
    assert bound_of("training.some_new_number") == DEFAULT_BOUND


def test_a_number_outside_its_bound_names_key_bound_and_reason() -> None:
    data = json.loads(json.dumps(TINY))
    data["training"]["seq_len"] = 10**9
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    (problem,) = info.value.problems
    assert problem.path == "training.seq_len"
    assert "outside [1, 1e+08]" in problem.message and "contexts" in problem.message
    assert check_bounds(parse_scenario(TINY).scenario) == []


# ------------------------------------------------------------------------------- property test
def _sane_or_wild(draw: st.DrawFn, sane: st.SearchStrategy[Any], wild: st.SearchStrategy[Any]) -> Any:
    """Mostly a value a real plan would have; one time in five anything at all."""
    return draw(wild) if draw(st.integers(0, 4)) == 0 else draw(sane)


def _scenario(draw: st.DrawFn) -> dict[str, Any]:
    tp, pp = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4]))
    nodes = _sane_or_wild(draw, st.sampled_from([1, 2, 4]), st.integers(1, 10**8))
    micro = draw(st.integers(1, 4))
    dp = max(1, nodes * 8 // (tp * pp))  # dgx-a100-80gb: 8 GPUs per node
    heads = tp * draw(st.sampled_from([1, 2]))
    anything = st.floats(allow_nan=True, allow_infinity=True)
    return {
        "model": {
            "preset": "tiny-gpt",
            "num_attention_heads": heads,
            "num_key_value_heads": heads,
            "hidden_size": heads * 16,
            "num_hidden_layers": _sane_or_wild(
                draw, st.integers(1, 4).map(lambda k: k * pp), st.integers(1, 2**64)
            ),
        },
        "training": {
            "seq_len": draw(st.sampled_from([16, 64, 128])),
            "micro_batch_size": micro,
            "global_batch_size": _sane_or_wild(
                draw, st.integers(1, 16).map(lambda k: k * micro * dp), st.integers(1, 10**13)
            ),
            "dtype": "fp32",
            "recompute": draw(st.sampled_from(["none", "selective", "full"])),
        },
        "parallelism": {
            "tensor_parallel_degree": tp,
            "pipeline_parallel_degree": pp,
            "pipeline_parallel_schedule": draw(st.sampled_from(["GPipe", "1F1B", "ZeroBubble"])),
            "zero_stage": draw(st.sampled_from([0, 1, 2, 3])),
            "ddp_bucket_cap_MiB": _sane_or_wild(draw, st.floats(0.01, 1000), anything),
        },
        "cluster": {
            "preset": "dgx-a100-80gb",
            "num_nodes": nodes,
            "compute": {
                "op_overhead_us": _sane_or_wild(draw, st.floats(0, 100), anything),
                "matmul_half_gflop": _sane_or_wild(draw, st.floats(0, 10), anything),
            },
        },
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_simulate_succeeds_with_sane_numbers_or_exits_2(tmp_path_factory: Any, data: st.DataObject) -> None:
    scenario = data.draw(st.composite(_scenario)())
    path = tmp_path_factory.mktemp("prop") / "s.toml"
    try:
        path.write_text(tomli_w.dumps(scenario))
    except (TypeError, ValueError, OverflowError):  # tomli_w refuses some numbers: not a scenario file
        return
    code, out, err = cli_main("simulate", str(path), "--json")
    event(f"exit {code}")
    assert "Traceback" not in out + err
    if code == 2:
        assert err.startswith("error: "), err
        return
    assert code == 0, err
    summary = json.loads(out)  # strict: json.loads accepts NaN, so check every number below
    for key in ("step_time_s", "compute_time_s", "exposed_comm_time_s", "peak_memory_gib", "mfu"):
        assert math.isfinite(summary[key]) and summary[key] >= 0, (key, summary[key])
    assert 0 <= summary["bubble_fraction"] < 1
    assert "NaN" not in out and "Infinity" not in out
