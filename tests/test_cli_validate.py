"""`plancast validate`: the resolved scenario on stdout (exit 0), or "error:" lines on stderr (exit 2).

Never a traceback for bad input (docs/cli.md, the CLI contract). A handful of cases run the real command in
a subprocess; the many cases run `cli.main` in-process (tests/simulator/test_scenario.py), and the
fuzzing here does too, because a subprocess per example would be slow.
"""

from __future__ import annotations

import copy
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plancast.simulator.loader import load_scenario, to_toml_dict
from tests.cli_runner import cli_main, cli_subprocess

REPO = Path(__file__).parents[1]
EXAMPLES = REPO / "examples"
TINY: dict[str, Any] = {
    "model": {"preset": "tiny-gpt"},
    "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 8, "dtype": "fp32"},
    "parallelism": {"pipeline_parallel_degree": 2},
    "cluster": {"preset": "local-cpu"},
}


def run_subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_subprocess(*args, timeout_s=60)


SUBPROCESS_CASES = [
    ("unknown-key", tomli_w.dumps({**TINY, "parallelism": {"tp": 2}}), "parallelism.tp: unknown key"),
    (
        "tp-not-dividing",
        tomli_w.dumps({**TINY, "parallelism": {"tensor_parallel_degree": 3}}),
        "parallelism.tensor_parallel_degree: tp * pp = 3 * 1 = 3 does not divide the world size 2",
    ),
    ("toml-syntax", "[model\npreset = 'tiny-gpt'\n", "TOML syntax error"),
    ("empty", "", "model: required key is missing"),
    ("unknown-preset", tomli_w.dumps({**TINY, "model": {"preset": "tiny-gtp"}}), "did you mean 'tiny-gpt'"),
    ("not-utf8", b"\xff\xfe[model]".decode("latin-1"), "cannot read"),
]


@pytest.mark.parametrize(
    ("name", "content", "expected"), SUBPROCESS_CASES, ids=[c[0] for c in SUBPROCESS_CASES]
)
def test_validate_bad_input_in_a_real_process(tmp_path: Path, name: str, content: str, expected: str) -> None:
    path = tmp_path / f"{name}.toml"
    path.write_bytes(content.encode("latin-1" if name == "not-utf8" else "utf-8"))
    result = run_subprocess("validate", str(path))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {path} is not valid")
    assert expected in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""


def test_validate_missing_file_in_a_real_process(tmp_path: Path) -> None:
    result = run_subprocess("validate", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert f"file not found: {tmp_path / 'nope.toml'}" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_validate_the_design_example_in_a_real_process() -> None:
    """stdout is the resolved scenario as TOML, and it is itself a valid, identical scenario."""
    result = run_subprocess("validate", str(EXAMPLES / "gpt3-175b-dgx-a100.toml"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    resolved = tomllib.loads(result.stdout)
    assert resolved["parallelism"]["data_parallel_degree"] == 24
    assert resolved["parallelism"]["pipeline_layer_split"] == [12] * 8
    assert [t["size"] for t in resolved["cluster"]["tiers"]] == [8, 1536]
    assert "preset" not in resolved["model"] and "preset" not in resolved["cluster"]
    assert resolved == to_toml_dict(load_scenario(EXAMPLES / "gpt3-175b-dgx-a100.toml").scenario)


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_validate_output_is_a_fixed_point(tmp_path: Path, example: Path) -> None:
    code, out, _ = cli_main("validate", str(example))
    assert code == 0
    again = tmp_path / "resolved.toml"
    again.write_text(out)
    code2, out2, err2 = cli_main("validate", str(again))
    assert (code2, out2) == (0, out), err2
    assert load_scenario(again).scenario == load_scenario(example).scenario
    # the tool's own output reads back with no more warnings than the scenario it resolved
    _, _, first_err = cli_main("validate", str(example))
    assert err2.count("warning:") <= first_err.count("warning:"), err2


@pytest.mark.parametrize(
    ("framework", "key", "warns"),
    [
        ("torchtitan", "parallelism.overlap_grad_reduce", True),
        ("megatron-lm", "parallelism.overlap_grad_reduce", False),
        ("torchtitan", "training.grad_accumulation_fp32", True),
        ("megatron-lm", "training.grad_accumulation_fp32", False),
    ],
)
def test_a_key_that_changes_nothing_says_so(tmp_path: Path, framework: str, key: str, warns: bool) -> None:
    """Under torchtitan a chunk's gradients form one DDP bucket and are fp32 whatever is asked, so these
    two keys set to false cannot move the prediction there; under megatron-lm they do, and nothing is
    said."""
    table, name = key.split(".")
    tables = {"training": {"global_batch_size": 64}, "parallelism": {"framework": framework}}
    tables[table][name] = False
    path = tmp_path / "s.toml"
    cluster = {"preset": "dgx-h100-80gb", "num_nodes": 2}
    path.write_text(tomli_w.dumps({"model": {"preset": "gpt3-1.3b"}, **tables, "cluster": cluster}))
    code, _, err = cli_main("simulate", str(path), "--json")
    assert code == 0, err
    assert ("changes nothing" in err) is warns, err


def test_validate_lists_every_problem(tmp_path: Path) -> None:
    data = copy.deepcopy(TINY)
    data["training"] = {**TINY["training"], "dtype": "fp8", "micro_batch_size": 0}
    data["parallelism"] = {**TINY["parallelism"], "tp": 2}
    path = tmp_path / "three.toml"
    path.write_text(tomli_w.dumps(data))
    code, out, err = cli_main("validate", str(path))
    assert code == 2 and out == ""
    assert "(3 problem(s))" in err
    for line in ("  - training.micro_batch_size:", "  - training.dtype:", "  - parallelism.tp: unknown key"):
        assert line in err


# ---------------------------------------------------------------------------------- CLI fuzzing
scalars = st.one_of(
    st.integers(-2, 16),
    st.booleans(),
    st.floats(allow_nan=True),
    st.sampled_from(["tiny-gpt", "local-cpu", "1F1B", "Interleaved1F1B", "fp32", "x"]),
)
sections = st.sampled_from(["model", "training", "parallelism", "cluster", "unknown"])
keys = st.sampled_from(
    [
        "preset",
        "hidden_size",
        "num_hidden_layers",
        "seq_len",
        "global_batch_size",
        "dtype",
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "virtual_stages_per_rank",
        "pipeline_parallel_schedule",
        "sequence_parallel",
        "num_nodes",
        "gpus_per_node",
        "tiers",
        "gpu",
        "zero_stage",
        "typo",
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(sections, keys, scalars), max_size=4), drop=st.sets(sections, max_size=2))
def test_fuzz_validate_exits_0_or_2_without_a_traceback(
    tmp_path: Path, edits: list[tuple[str, str, object]], drop: set[str]
) -> None:
    data: dict[str, Any] = copy.deepcopy(TINY)
    for section, key, value in edits:
        data.setdefault(section, {})[key] = value
    for section in drop:
        data.pop(section, None)
    path = tmp_path / "fuzz.toml"
    path.write_text(tomli_w.dumps(data))
    code, out, err = cli_main("validate", str(path))
    assert code in (0, 2)
    assert "Traceback" not in out + err
    if code == 0:
        assert tomllib.loads(out) == to_toml_dict(load_scenario(path).scenario)
        assert not err or all(line.startswith("warning: ") for line in err.splitlines())
    else:
        assert err.startswith("error: ") and out == ""
