"""Scenario loading: every invalid plan is a ScenarioError naming the key path; valid ones resolve.

Each invalid case is checked twice: through `load_scenario` (the path and a fragment of the message)
and through the `plancast validate` entry point in-process (exit code 2, "error:", no traceback).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plancast.simulator.loader import Loaded, ScenarioError, load_scenario, parse_scenario, to_toml_dict
from plancast.simulator.scenario import even_layer_split
from tests.cli_runner import cli_main

EXAMPLES = Path(__file__).parents[2] / "examples"

# A small valid plan: 2 nodes x 4 GPUs, tp 2 * pp 2 * dp 2, 8 micro-batches of 1, no warnings.
BASE: dict[str, Any] = {
    "model": {
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "vocab_size": 1024,
        "max_position_embeddings": 1024,
    },
    "training": {"seq_len": 512, "micro_batch_size": 1, "global_batch_size": 16, "dtype": "bf16"},
    "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2},
    "cluster": {
        "gpu": "A100-SXM4-80GB",
        "num_nodes": 2,
        "gpus_per_node": 4,
        "tiers": [
            {"name": "nvlink", "size": 4, "bandwidth_GBps": 300.0},
            {"name": "infiniband", "bandwidth_GBps": 25.0},
        ],
    },
}
CUSTOM_GPU = {"peak_tflops": {"fp32": 10.0}, "hbm_GBps": 100.0, "memory_GiB": 16.0}


def with_(**changes: Any) -> Callable[[], str]:
    """BASE as TOML with keys set (`model__hidden_size=8`, `cluster__tiers__0__size=4`) or dropped (DROP)."""

    def build() -> str:
        data = copy.deepcopy(BASE)
        for dotted, value in changes.items():
            *parents, last = [int(p) if p.isdigit() else p for p in dotted.split("__")]
            node: Any = data
            for part in parents:
                node = node[part]
            if value is DROP:
                del node[last]
            else:
                node[last] = value
        return tomli_w.dumps(data)

    return build


DROP = object()


def text(raw: str) -> Callable[[], str]:
    return lambda: raw


@dataclass(frozen=True)
class Invalid:
    id: str
    toml: Callable[[], str]
    path: str  # the key path the error names ("" for file-level problems)
    fragment: str  # part of the message


INVALID = [
    # unknown keys, at every level
    Invalid("unknown-top-level", with_(optimizer={"lr": 1e-4}), "optimizer", "unknown key"),
    Invalid("unknown-model-key", with_(model__hidden_sise=512), "model.hidden_sise", "unknown key"),
    Invalid(
        "unknown-training-key",
        with_(training__sequence_length=512),
        "training.sequence_length",
        "unknown key",
    ),
    Invalid("unknown-parallelism-key", with_(parallelism__tp=2), "parallelism.tp", "unknown key"),
    Invalid("unknown-cluster-key", with_(cluster__nodes=2), "cluster.nodes", "unknown key"),
    Invalid(
        "unknown-tier-key",
        with_(cluster__tiers__1__bandwidth=25),
        "cluster.tiers[1].bandwidth",
        "unknown key",
    ),
    Invalid(
        "unknown-gpu-key",
        with_(cluster__gpu={**CUSTOM_GPU, "tflops": 10}),
        "cluster.gpu.tflops",
        "unknown key",
    ),
    Invalid(
        "unknown-compute-key", with_(cluster__compute={"mfu": 0.5}), "cluster.compute.mfu", "unknown key"
    ),
    # wrong types
    Invalid("string-for-int", with_(model__hidden_size="big"), "model.hidden_size", "valid integer"),
    Invalid(
        "fractional-int", with_(training__micro_batch_size=1.5), "training.micro_batch_size", "valid integer"
    ),
    Invalid(
        "string-for-bool",
        with_(parallelism__sequence_parallel="maybe"),
        "parallelism.sequence_parallel",
        "valid boolean",
    ),
    Invalid(
        "split-not-a-list",
        with_(parallelism__pipeline_layer_split="4,4"),
        "parallelism.pipeline_layer_split",
        "valid list",
    ),
    Invalid("model-not-a-table", with_(model=5), "model", "valid dictionary"),
    Invalid("tiers-not-a-list", with_(cluster__tiers={"name": "x"}), "cluster.tiers", "valid list"),
    # out-of-range values
    Invalid(
        "negative-layers", with_(model__num_hidden_layers=-1), "model.num_hidden_layers", "greater than 0"
    ),
    Invalid(
        "zero-micro-batch", with_(training__micro_batch_size=0), "training.micro_batch_size", "greater than 0"
    ),
    Invalid(
        "zero-tp",
        with_(parallelism__tensor_parallel_degree=0),
        "parallelism.tensor_parallel_degree",
        "greater than 0",
    ),
    Invalid(
        "zero-dp",
        with_(parallelism__data_parallel_degree=0),
        "parallelism.data_parallel_degree",
        "or -1 to infer",
    ),
    Invalid(
        "dp-minus-two",
        with_(parallelism__data_parallel_degree=-2),
        "parallelism.data_parallel_degree",
        "or -1 to infer",
    ),
    Invalid("zero-gpus-per-node", with_(cluster__gpus_per_node=0), "cluster.gpus_per_node", "greater than 0"),
    Invalid(
        "negative-latency",
        with_(cluster__tiers__0__latency_us=-1.0),
        "cluster.tiers[0].latency_us",
        "greater than or equal to 0",
    ),
    Invalid(
        "tier-efficiency-above-1",
        with_(cluster__tiers__0__efficiency=1.2),
        "cluster.tiers[0].efficiency",
        "less than or equal to 1",
    ),
    Invalid(
        "compute-efficiency-above-1",
        with_(cluster__compute={"matmul_efficiency": 1.5}),
        "cluster.compute.matmul_efficiency",
        "less than or equal to 1",
    ),
    Invalid(
        "zero-stage-4", with_(parallelism__zero_stage=4), "parallelism.zero_stage", "Input should be 0, 1, 2"
    ),
    # names outside their vocabulary
    Invalid("bad-dtype", with_(training__dtype="fp8"), "training.dtype", "'fp32', 'fp16' or 'bf16'"),
    Invalid("bad-recompute", with_(training__recompute="partial"), "training.recompute", "'selective'"),
    Invalid(
        "bad-schedule",
        with_(parallelism__pipeline_parallel_schedule="1f1b"),
        "parallelism.pipeline_parallel_schedule",
        "'Interleaved1F1B'",
    ),
    Invalid(
        "bad-activation", with_(model__activation="relu"), "model.activation", "'gelu', 'swiglu' or 'relu2'"
    ),
    # missing pieces
    Invalid("missing-model", with_(model=DROP), "model", "required key is missing"),
    Invalid("missing-cluster", with_(cluster=DROP), "cluster", "required key is missing"),
    Invalid(
        "missing-hidden-size", with_(model__hidden_size=DROP), "model.hidden_size", "required key is missing"
    ),
    Invalid("missing-tier-name", with_(cluster__tiers__0__name=DROP), "cluster.tiers[0].name", "required"),
    Invalid("no-tiers", with_(cluster__tiers=[]), "cluster.tiers", "at least 1 item"),
    Invalid("empty-file", text(""), "model", "required key is missing"),
    Invalid("toml-syntax-error", text("[model]\nhidden_size = = 4\n"), "", "TOML syntax error"),
    Invalid("toml-duplicate-table", text("[model]\n[model]\n"), "", "TOML syntax error"),
    # degrees and world size
    Invalid(
        "tp-pp-not-dividing-world",
        with_(parallelism__pipeline_parallel_degree=3),
        "parallelism.tensor_parallel_degree",
        "does not divide the world size 8",
    ),
    Invalid(
        "dp-mismatch",
        with_(parallelism__data_parallel_degree=4),
        "parallelism.data_parallel_degree",
        "but the cluster has 8 ranks; set it to 2",
    ),
    # model shape against tensor parallel
    Invalid(
        "heads-not-divisible-by-tp",
        with_(
            model__num_attention_heads=12,
            model__num_key_value_heads=12,
            model__hidden_size=768,
            parallelism__tensor_parallel_degree=8,
            parallelism__pipeline_parallel_degree=1,
        ),
        "model.num_attention_heads",
        "not divisible by parallelism.tensor_parallel_degree (8)",
    ),
    Invalid(
        "kv-heads-not-divisible-by-tp",
        with_(model__num_key_value_heads=2, parallelism__tensor_parallel_degree=4),
        "model.num_key_value_heads",
        "not divisible by parallelism.tensor_parallel_degree (4)",
    ),
    Invalid(
        "heads-not-divisible-by-kv",
        with_(model__num_key_value_heads=3),
        "model.num_attention_heads",
        "not divisible by num_key_value_heads (3)",
    ),
    Invalid(
        "hidden-not-divisible-by-heads",
        with_(model__hidden_size=500),
        "model.hidden_size",
        "not divisible by num_attention_heads (8)",
    ),
    Invalid(
        "ffn-not-divisible-by-tp",
        with_(model__intermediate_size=1001),
        "model.intermediate_size",
        "1001 is not divisible by parallelism.tensor_parallel_degree (2)",
    ),
    # batch
    Invalid(
        "global-batch-not-divisible",
        with_(training__global_batch_size=15),
        "training.global_batch_size",
        "micro_batch_size * dp = 1 * 2 = 2",
    ),
    # pipeline
    Invalid(
        "interleaved-with-v1",
        with_(parallelism__pipeline_parallel_schedule="Interleaved1F1B"),
        "parallelism.virtual_stages_per_rank",
        "at least 2 virtual stages",
    ),
    Invalid(
        "v2-with-1f1b",
        with_(parallelism__virtual_stages_per_rank=2),
        "parallelism.virtual_stages_per_rank",
        "1F1B runs one stage per rank",
    ),
    Invalid(
        "interleaved-microbatches-not-multiple-of-pp",
        with_(
            parallelism__pipeline_parallel_schedule="Interleaved1F1B",
            parallelism__virtual_stages_per_rank=2,
            training__global_batch_size=6,
        ),
        "training.global_batch_size",
        "micro-batch count (3) divisible by pipeline_parallel_degree (2)",
    ),
    Invalid(
        "more-stages-than-layers",
        with_(model__num_hidden_layers=1),
        "parallelism.pipeline_parallel_degree",
        "only 1 layers",
    ),
    Invalid(
        "split-wrong-length",
        with_(parallelism__pipeline_layer_split=[8]),
        "parallelism.pipeline_layer_split",
        "has 1 entries",
    ),
    Invalid(
        "split-wrong-sum",
        with_(parallelism__pipeline_layer_split=[4, 5]),
        "parallelism.pipeline_layer_split",
        "sums to 9",
    ),
    Invalid(
        "split-with-interior-zero",
        with_(
            parallelism__pipeline_parallel_schedule="Interleaved1F1B",
            parallelism__virtual_stages_per_rank=2,
            parallelism__pipeline_layer_split=[4, 0, 2, 2],
        ),
        "parallelism.pipeline_layer_split",
        "every stage between the first and the last needs at least one layer",
    ),
    Invalid(
        "split-with-negative",
        with_(parallelism__pipeline_layer_split=[9, -1]),
        "parallelism.pipeline_layer_split",
        "entry 1 (-1) is outside [0, 10000]",
    ),
    # sequence parallel and sequence length
    Invalid(
        "sp-with-tp1",
        with_(parallelism__sequence_parallel=True, parallelism__tensor_parallel_degree=1),
        "parallelism.sequence_parallel",
        "needs tensor_parallel_degree > 1",
    ),
    Invalid(
        "sp-seq-not-divisible",
        with_(parallelism__sequence_parallel=True, training__seq_len=511),
        "training.seq_len",
        "sequence parallel splits the sequence",
    ),
    Invalid(
        "seq-longer-than-positions",
        with_(training__seq_len=2048),
        "training.seq_len",
        "exceeds model.max_position_embeddings (1024)",
    ),
    # cluster
    Invalid(
        "tiers-not-nested",
        with_(
            cluster__tiers=[
                {"name": "a", "size": 4, "bandwidth_GBps": 1.0},
                {"name": "b", "size": 2, "bandwidth_GBps": 1.0},
                {"name": "c", "bandwidth_GBps": 1.0},
            ]
        ),
        "cluster.tiers[1].size",
        "multiple of, and larger than, the tier inside it (4)",
    ),
    Invalid(
        "tier-not-dividing-world",
        with_(cluster__tiers__0__size=3),
        "cluster.tiers[0].size",
        "does not divide the cluster's 8 ranks",
    ),
    Invalid(
        "inner-tier-without-size",
        with_(cluster__tiers__0__size=DROP),
        "cluster.tiers[0].size",
        "required for every tier but the outermost",
    ),
    Invalid(
        "dtype-without-peak",
        with_(cluster__gpu=CUSTOM_GPU),
        "training.dtype",
        "bf16 has no peak in cluster.gpu.peak_tflops (['fp32'])",
    ),
    Invalid(
        "custom-gpu-missing-memory",
        with_(cluster__gpu={"peak_tflops": 10.0, "hbm_GBps": 100.0}),
        "cluster.gpu.memory_GiB",
        "required key is missing",
    ),
    # presets (their key paths are a known gap: see PATHLESS below)
    Invalid(
        "unknown-model-preset",
        with_(model={"preset": "gpt3-175"}),
        "model.preset",
        "unknown model preset 'gpt3-175'; did you mean 'gpt3-175b'",
    ),
    Invalid(
        "unknown-cluster-preset",
        with_(cluster={"preset": "dgx-a100"}),
        "cluster.preset",
        "unknown cluster preset 'dgx-a100'",
    ),
    Invalid("unknown-gpu", with_(cluster__gpu="A100"), "cluster.gpu", "unknown GPU preset 'A100'"),
]


def _load(tmp_path: Path, case: Invalid) -> Loaded:
    path = tmp_path / f"{case.id}.toml"
    path.write_text(case.toml())
    return load_scenario(path)


def test_base_is_valid_and_quiet() -> None:
    loaded = parse_scenario(BASE)
    assert loaded.warnings == ()
    assert (loaded.scenario.dp, loaded.scenario.num_microbatches) == (2, 8)


def test_cases_are_distinct() -> None:
    assert len({c.id for c in INVALID}) == len(INVALID) >= 30
    assert len({c.toml() for c in INVALID}) == len(INVALID)


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_scenario_names_the_key(tmp_path: Path, case: Invalid) -> None:
    with pytest.raises(ScenarioError) as info:
        _load(tmp_path, case)
    problems = [(p.path, p.message) for p in info.value.problems]
    assert any(path == case.path and case.fragment in message for path, message in problems), problems
    assert str(tmp_path) in str(info.value)  # the file is named


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_scenario_through_the_cli(tmp_path: Path, case: Invalid) -> None:
    path = tmp_path / f"{case.id}.toml"
    path.write_text(case.toml())
    code, out, err = cli_main("validate", str(path))
    assert code == 2
    assert err.startswith("error: ")
    assert case.fragment in err
    assert "Traceback" not in out + err
    assert out == ""


# ------------------------------------------------------------------- problems found by review
def test_unknown_preset_does_not_hide_others() -> None:
    import tomllib

    data = tomllib.loads(with_(model={"preset": "gpt3-175"}, training__dtype="fp8")())
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert {p.path for p in info.value.problems} >= {"training.dtype"}


@pytest.mark.parametrize("peak", [0.0, -5.0, math.nan])
def test_gpu_peak_must_be_positive(peak: float) -> None:
    gpu = {"peak_tflops": {"bf16": peak}, "hbm_GBps": 100.0, "memory_GiB": 16.0}
    data = copy.deepcopy(BASE)
    data["cluster"]["gpu"] = gpu
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert [p.path for p in info.value.problems] == ["cluster.gpu.peak_tflops.bf16"]


@pytest.mark.parametrize(
    "key", ["model__num_hidden_layers", "training__micro_batch_size", "cluster__num_nodes"]
)
def test_boolean_is_not_an_integer(key: str) -> None:
    import tomllib

    with pytest.raises(ScenarioError) as info:
        parse_scenario(tomllib.loads(with_(**{key: True})()))
    assert key.replace("__", ".") in [p.path for p in info.value.problems]


# ----------------------------------------------------------------------------------- valid cases
def test_design_example_resolves() -> None:
    loaded = load_scenario(EXAMPLES / "gpt3-175b-dgx-a100.toml")
    s = loaded.scenario
    assert (s.world_size, s.tp, s.pp, s.dp) == (1536, 8, 8, 24)
    assert s.num_microbatches == 64
    assert s.layer_split == (12,) * 8
    assert s.parallelism.pipeline_layer_split == [12] * 8
    assert s.parallelism.data_parallel_degree == 24
    assert s.cluster.tier_sizes == (8, 1536)
    assert [t.size for t in s.cluster.tiers] == [8, 1536]
    assert (s.model.preset, s.cluster.preset) == (None, None)
    assert loaded.warnings == ()


def test_tiny_example_resolves() -> None:
    s = load_scenario(EXAMPLES / "tiny-local-cpu.toml").scenario
    assert (s.world_size, s.tp, s.pp, s.dp, s.num_microbatches, s.layer_split) == (2, 1, 2, 1, 4, (2, 2))


def test_model_preset_is_overridden_by_explicit_keys() -> None:
    data = {**BASE, "model": {"preset": "llama3-8b", "num_hidden_layers": 4, "max_position_embeddings": 4096}}
    m = parse_scenario(data).scenario.model
    assert (m.hidden_size, m.num_hidden_layers, m.kv_heads, m.ffn_size) == (4096, 4, 8, 14336)
    assert (m.max_position_embeddings, m.activation, m.tie_word_embeddings) == (4096, "swiglu", False)


def test_cluster_preset_is_scaled_and_overridden() -> None:
    data = {**BASE, "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 4, "gpu": "H200-SXM-141GB"}}
    c = parse_scenario(data).scenario.cluster
    assert (c.world_size, c.gpu.name, c.gpu.memory_GiB) == (32, "H200-SXM-141GB", 140.4)
    assert c.tier_sizes == (8, 32)
    assert c.tiers[0].bandwidth_GBps == 450.0


def test_explicit_tiers_replace_the_presets_tiers() -> None:
    tiers = [{"name": "pcie", "size": 4, "bandwidth_GBps": 16.0}, {"name": "eth", "bandwidth_GBps": 1.0}]
    cluster = {"preset": "dgx-a100-80gb", "num_nodes": 1, "gpus_per_node": 8, "tiers": tiers}
    data = {**BASE, "cluster": cluster}
    c = parse_scenario(data).scenario.cluster
    assert [(t.name, t.size, t.bandwidth_GBps) for t in c.tiers] == [("pcie", 4, 16.0), ("eth", 8, 1.0)]


def test_defaults_are_filled_in() -> None:
    data = {"model": {"preset": "tiny-gpt"}, "training": {"seq_len": 128}, "cluster": {"preset": "local-cpu"}}
    s = parse_scenario(data).scenario
    assert (s.tp, s.pp, s.dp, s.parallelism.pipeline_layer_split) == (1, 1, 2, [4])
    assert (s.training.dtype, s.training.recompute, s.training.global_batch_size) == ("bf16", "none", 8)
    assert (s.parallelism.pipeline_parallel_schedule, s.parallelism.zero_stage, s.vpp) == ("1F1B", 0, 1)
    assert s.model.ffn_size == 4 * 64


def test_swiglu_default_ffn_is_llamas() -> None:
    """Touvron et al. 2023: 2/3 of 4h rounded up to a multiple of 256 (4096 -> 11008)."""
    data = {**BASE, "model": {**BASE["model"], "hidden_size": 4096, "activation": "swiglu"}}
    assert parse_scenario(data).scenario.model.ffn_size == 11008


@pytest.mark.parametrize(
    ("layers", "stages", "expected"),
    [
        (70, 12, (5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5)),  # BLOOM-176B
        (96, 8, (12,) * 8),
        (8, 3, (2, 3, 3)),  # middle first, then the last stage
        (9, 4, (2, 3, 2, 2)),  # one extra layer goes to the first middle stage
        (10, 4, (2, 3, 3, 2)),
        (11, 4, (2, 3, 3, 3)),  # then the last stage
        (5, 1, (5,)),
        (4, 4, (1, 1, 1, 1)),
        (3, 2, (1, 2)),
    ],
)
def test_even_layer_split(layers: int, stages: int, expected: tuple[int, ...]) -> None:
    assert even_layer_split(layers, stages) == expected


@given(layers=st.integers(1, 200), stages=st.integers(1, 64))
def test_even_layer_split_properties(layers: int, stages: int) -> None:
    split = even_layer_split(layers, stages)
    assert len(split) == stages and sum(split) == layers
    assert max(split) - min(split) <= 1
    if stages > 1 and layers % stages:
        assert split[0] == min(split)  # the first stage also holds the embedding


def test_interleaved_split_has_one_entry_per_virtual_stage() -> None:
    par = {
        **BASE["parallelism"],
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "virtual_stages_per_rank": 2,
    }
    s = parse_scenario({**BASE, "parallelism": par}).scenario
    assert s.layer_split == (2, 2, 2, 2)


def test_end_stages_may_hold_only_the_embedding_or_the_head() -> None:
    """Megatron-core's --account-for-embedding/loss-in-pipeline-split and Llama 3's schedule: a first
    chunk with only the embedding and a last with only the output layer; more stages than layers."""
    par = {
        **BASE["parallelism"],
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "virtual_stages_per_rank": 5,
        "pipeline_layer_split": [0, 1, 1, 1, 1, 1, 1, 1, 1, 0],
    }
    loaded = parse_scenario({**BASE, "parallelism": par})
    assert loaded.scenario.layer_split == (0, 1, 1, 1, 1, 1, 1, 1, 1, 0)


def test_explicit_layer_split_is_kept() -> None:
    par = {**BASE["parallelism"], "pipeline_layer_split": [3, 5]}
    assert parse_scenario({**BASE, "parallelism": par}).scenario.layer_split == (3, 5)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        (
            {
                "parallelism": {"tensor_parallel_degree": 8, "pipeline_parallel_degree": 1},
                "model": {**BASE["model"], "num_key_value_heads": 8},
            },
            "tensor_parallel_degree 8 is wider than the nvlink domain (4 ranks)",
        ),
        (
            {"parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 4, "zero_stage": 1}},
            "zero_stage 1 with one data-parallel rank shards nothing",
        ),
        (
            {"parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2, "zero_stage": 3}},
            "ZeRO-2/3 with pipeline parallelism",
        ),
        (
            {
                "parallelism": {
                    "tensor_parallel_degree": 2,
                    "pipeline_parallel_degree": 1,
                    "pipeline_parallel_schedule": "ZeroBubble",
                }
            },
            "ZeroBubble has no effect",
        ),
        (
            {
                "parallelism": {"tensor_parallel_degree": 1, "pipeline_parallel_degree": 8},
                "training": {**BASE["training"], "global_batch_size": 4},
            },
            "4 micro-batches on 8 stages",
        ),
        (
            {
                "cluster": {
                    **BASE["cluster"],
                    "tiers": [
                        BASE["cluster"]["tiers"][0],
                        {"name": "infiniband", "size": 16, "bandwidth_GBps": 25.0},
                    ],
                }
            },
            "cluster.tiers[1].size = 16 ignored",
        ),
    ],
    ids=[
        "tp-wider-than-nvlink",
        "zero-with-dp1",
        "zero3-with-pp",
        "zb-without-pp",
        "few-microbatches",
        "outer-tier-size",
    ],
)
def test_unwise_plans_warn(changes: dict[str, Any], fragment: str) -> None:
    loaded = parse_scenario({**BASE, **changes})
    assert any(fragment in w for w in loaded.warnings), loaded.warnings


def test_warnings_reach_stderr_and_exit_zero(tmp_path: Path) -> None:
    path = tmp_path / "wide-tp.toml"
    wide = {
        **BASE,
        "parallelism": {"tensor_parallel_degree": 8, "pipeline_parallel_degree": 1},
        "model": {**BASE["model"], "num_key_value_heads": 8},
    }
    path.write_text(tomli_w.dumps(wide))
    code, out, err = cli_main("validate", str(path))
    assert code == 0
    assert err.startswith("warning: tensor_parallel_degree 8 is wider than the nvlink domain")
    assert "[parallelism]\ntensor_parallel_degree = 8\n" in out


# ------------------------------------------------------------------------------ property fuzzing
# Keys the scenario knows, so that mutations reach the plan checks and not only "unknown key".
KEYS = {
    "model": [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "activation",
        "norm",
        "position_embedding",
        "max_position_embeddings",
        "tie_word_embeddings",
        "preset",
    ],
    "training": ["seq_len", "micro_batch_size", "global_batch_size", "dtype", "recompute", "steps", "seed"],
    "parallelism": [
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "data_parallel_degree",
        "zero_stage",
        "pipeline_parallel_schedule",
        "virtual_stages_per_rank",
        "pipeline_layer_split",
        "sequence_parallel",
        "overlap_grad_reduce",
        "ddp_bucket_cap_MiB",
    ],
    "cluster": ["preset", "gpu", "num_nodes", "gpus_per_node", "tiers", "compute"],
}
scalars = st.one_of(
    st.integers(-3, 70),
    st.integers(),
    st.sampled_from([0, 1, 2, 4, 8, 16, 96, 2048]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(
        [
            "",
            "gelu",
            "swiglu",
            "fp16",
            "bf16",
            "1F1B",
            "Interleaved1F1B",
            "ZeroBubble",
            "full",
            "tiny-gpt",
            "llama3-8b",
            "dgx-a100-80gb",
            "local-cpu",
            "A100-SXM4-80GB",
            "cpu-core",
        ]
    ),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


@st.composite
def mutated_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """BASE after a few random edits: drop a key, set a known key to any value, add an unknown key."""
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from(sorted(KEYS)))
        table = data.setdefault(section, {})
        if not isinstance(table, dict):
            continue
        op = draw(st.sampled_from(["drop", "set", "set", "set", "unknown", "tier", "replace"]))
        if op == "drop" and table:
            del table[draw(st.sampled_from(sorted(table)))]
        elif op == "set":
            table[draw(st.sampled_from(KEYS[section]))] = draw(values)
        elif op == "unknown":
            table[draw(st.text(min_size=1, max_size=6))] = draw(values)
        elif op == "tier" and section == "cluster" and isinstance(tiers := table.get("tiers"), list):
            if not tiers or not isinstance(tier := tiers[0], dict):
                continue
            key = draw(st.sampled_from(["name", "size", "bandwidth_GBps", "latency_us", "efficiency", "x"]))
            tier[key] = draw(values)
        elif op == "replace":
            data[section] = draw(values)
    return data


# Small plans of field-valid values (the strategies above cover field errors): these exercise the
# cross-field checks on both sides, and test_fuzz_reaches_valid_plans keeps it so.
def _mostly(*choices: object) -> st.SearchStrategy[Any]:
    return st.sampled_from(choices)


plans = st.fixed_dictionaries(
    {
        "model": st.fixed_dictionaries(
            {
                "hidden_size": _mostly(64, 128, 96, 100),
                "num_hidden_layers": _mostly(8, 4, 6, 5, 1),
                "num_attention_heads": _mostly(4, 8, 2, 1, 3),
                "vocab_size": st.just(256),
                "activation": _mostly("gelu", "swiglu"),
                "max_position_embeddings": _mostly(256, 64),
            },
            optional={"num_key_value_heads": _mostly(4, 2, 1, 8, 3)},
        ),
        "training": st.fixed_dictionaries(
            {
                "seq_len": _mostly(128, 64, 32, 30, 512),
                "micro_batch_size": _mostly(1, 2, 3),
                "global_batch_size": _mostly(8, 16, 32, 12, 6, 1),
                "dtype": _mostly("fp32", "bf16"),
            }
        ),
        "parallelism": st.fixed_dictionaries(
            {
                "tensor_parallel_degree": _mostly(1, 2, 4, 3),
                "pipeline_parallel_degree": _mostly(1, 2, 4, 3),
                "data_parallel_degree": _mostly(-1, 1, 2, 4),
                "zero_stage": _mostly(0, 1, 2, 3),
                "pipeline_parallel_schedule": _mostly("1F1B", "GPipe", "Interleaved1F1B", "ZeroBubble"),
                "virtual_stages_per_rank": _mostly(1, 2, 3),
                "sequence_parallel": st.booleans(),
            },
            optional={"pipeline_layer_split": st.lists(st.integers(-1, 5), max_size=8)},
        ),
        "cluster": st.fixed_dictionaries(
            {
                "preset": st.just("local-cpu"),
                "num_nodes": _mostly(1, 2),
                "gpus_per_node": _mostly(2, 4, 8, 3),
                "tiers": st.lists(
                    st.fixed_dictionaries(
                        {"name": st.just("t"), "bandwidth_GBps": st.just(1.0)},
                        optional={"size": _mostly(2, 4, 8, 3)},
                    ),
                    min_size=1,
                    max_size=2,
                ),
            }
        ),
    }
)


def _check_resolved(loaded: Loaded) -> None:
    """Identities every resolved scenario satisfies."""
    s = loaded.scenario
    assert s.tp * s.pp * s.dp == s.world_size
    assert s.num_microbatches * s.training.micro_batch_size * s.dp == s.training.global_batch_size
    split = s.parallelism.pipeline_layer_split
    assert split is not None and len(split) == s.pp * s.vpp and sum(split) == s.model.num_hidden_layers
    assert min(split) >= 1
    assert s.cluster.tiers[-1].size == s.world_size
    assert s.model.hidden_size % s.model.num_attention_heads == 0
    assert s.model.num_attention_heads % s.tp == 0 and s.model.kv_heads % s.tp == 0
    if s.parallelism.pipeline_parallel_schedule == "Interleaved1F1B":
        assert s.vpp >= 2 and s.num_microbatches % s.pp == 0
    else:
        assert s.vpp == 1
    assert parse_scenario(to_toml_dict(s)).scenario == s  # resolving is idempotent


def _load_text(tmp_path: Path, raw: str | bytes) -> Loaded | ScenarioError:
    path = tmp_path / "fuzz.toml"
    if isinstance(raw, bytes):
        path.write_bytes(raw)
    else:
        path.write_text(raw)
    try:
        return load_scenario(path)
    except ScenarioError as err:
        assert err.problems and all(isinstance(p.path, str) and p.message for p in err.problems)
        return err


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=mutated_scenarios())
def test_fuzz_mutated_scenarios(tmp_path: Path, data: dict[str, Any]) -> None:
    result = _load_text(tmp_path, tomli_w.dumps(data))
    if isinstance(result, Loaded):
        _check_resolved(result)


@FUZZ
@given(data=plans)
def test_fuzz_small_plans(tmp_path: Path, data: dict[str, Any]) -> None:
    result = _load_text(tmp_path, tomli_w.dumps(data))
    if isinstance(result, Loaded):
        _check_resolved(result)


@FUZZ
@given(data=st.dictionaries(st.sampled_from([*KEYS, "x"]), values, max_size=5))
def test_fuzz_random_documents(tmp_path: Path, data: dict[str, Any]) -> None:
    _load_text(tmp_path, tomli_w.dumps(data))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=64), st.text(max_size=64)))
def test_fuzz_arbitrary_bytes(tmp_path: Path, raw: str | bytes) -> None:
    _load_text(tmp_path, raw)


def test_fuzz_reaches_valid_plans() -> None:
    """Guard against a fuzzer that only ever produces errors: the small-plan strategy finds valid plans."""
    found: list[Loaded] = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(data=plans)
    def collect(data: dict[str, Any]) -> None:
        with suppress(ScenarioError):
            found.append(parse_scenario(data))

    collect()
    assert found


# ------------------------------------------------------------------------------ renamed keys
def test_the_old_bucket_key_is_read_with_a_warning_naming_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "old-key.toml"
    path.write_text(tomli_w.dumps({**BASE, "parallelism": {"ddp_bucket_cap_MB": 0.5}}))
    code, out, err = cli_main("validate", str(path))
    assert code == 0
    assert "parallelism.ddp_bucket_cap_MB is deprecated: rename it parallelism.ddp_bucket_cap_MiB" in err
    assert "ddp_bucket_cap_MiB = 0.5\n" in out and "ddp_bucket_cap_MB" not in out


def test_the_old_and_new_bucket_keys_together_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "both-keys.toml"
    path.write_text(tomli_w.dumps({**BASE, "parallelism": {"ddp_bucket_cap_MB": 1, "ddp_bucket_cap_MiB": 2}}))
    code, out, err = cli_main("validate", str(path))
    assert code == 2
    assert "parallelism.ddp_bucket_cap_MB: is the old name of ddp_bucket_cap_MiB" in err
    assert "Traceback" not in err + out
