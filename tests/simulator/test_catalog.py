"""Catalog presets: every one validates, model sizes match their papers, `plancast catalog` lists them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plancast.simulator import catalog
from plancast.simulator.cluster import GPU, Cluster
from plancast.simulator.costs.params import count_parameters
from plancast.simulator.goodput import plan_run
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Model, Scenario

REPO = Path(__file__).parents[2]


@pytest.mark.parametrize("name", sorted(catalog.GPUS))
def test_gpu_preset_validates(name: str) -> None:
    gpu = GPU.model_validate({"name": name, **catalog.GPUS[name]})
    assert gpu.hbm_GBps > 0 and gpu.memory_GiB > 0
    assert all(peak > 0 for peak in gpu.peak_tflops.values())
    for dtype in ("fp32", "fp16", "bf16"):  # every training dtype has a peak
        assert gpu.peak_flops(dtype) > 0
    assert gpu.peak_flops("bf16") >= gpu.peak_flops("fp32")


@pytest.mark.parametrize("name", sorted(catalog.CLUSTERS))
def test_cluster_preset_validates_and_scales(name: str) -> None:
    preset = catalog.CLUSTERS[name]
    assert preset["gpu"] in catalog.GPUS
    for nodes in (1, 4):
        cluster = Cluster.model_validate({"preset": name, "num_nodes": nodes})
        data = {"model": {"preset": "tiny-gpt"}, "training": {"seq_len": 128, "global_batch_size": 64},
                "cluster": {"preset": name, "num_nodes": nodes}}
        loaded = parse_scenario(data)
        assert loaded.warnings == ()
        assert loaded.scenario.cluster.tier_sizes[-1] == cluster.world_size == nodes * cluster.gpus_per_node


@pytest.mark.parametrize(("gpus_per_node", "sizes"), [(1, (2,)), (4, (4, 8)), (8, (8, 16)), (16, (8, 32))])
def test_node_tier_follows_a_smaller_node(gpus_per_node: int, sizes: tuple[int, ...]) -> None:
    """A DGX preset with fewer GPUs per node: NVLink spans the node's GPUs only (one GPU: no NVLink tier);
    a larger node keeps the preset's NVLink domain."""
    data = {"preset": "dgx-h100-80gb", "gpus_per_node": gpus_per_node, "num_nodes": 2}
    cluster = Cluster.model_validate(data)
    assert cluster.tier_sizes == sizes
    assert [t.name for t in cluster.tiers][-1] == "infiniband"


@pytest.mark.parametrize("name", sorted(catalog.MODELS))
def test_model_preset_passes_the_plan_checks(name: str) -> None:
    model = Model.model_validate({"preset": name})
    seq_len = min(2048, model.max_position_embeddings)
    data = {"model": {"preset": name}, "training": {"seq_len": seq_len, "global_batch_size": 8},
            "cluster": {"preset": "dgx-a100-80gb"}}
    assert parse_scenario(data).scenario.model == model.model_copy(update={"preset": None})


# (preset, published parameters, relative tolerance, source)
PUBLISHED = [
    ("gpt3-175b", 175e9, 0.01, "Brown et al. 2020, Table 2.1"),
    ("gpt3-13b", 13e9, 0.02, "Brown et al. 2020, Table 2.1"),
    ("gpt3-6.7b", 6.7e9, 0.02, "Brown et al. 2020, Table 2.1"),
    ("gpt3-2.7b", 2.7e9, 0.02, "Brown et al. 2020, Table 2.1"),
    ("gpt3-1.3b", 1.3e9, 0.02, "Brown et al. 2020, Table 2.1"),
    ("gpt3-760m", 760e6, 0.02, "Brown et al. 2020, Table 2.1"),
    ("gpt3-350m", 350e6, 0.02, "Brown et al. 2020, Table 2.1"),
    ("gpt3-125m", 125e6, 0.02, "Brown et al. 2020, Table 2.1"),
    ("megatron-22b", 22e9, 0.01, "Korthikanti et al. 2022, Table 3"),
    ("llama2-7b", 6.74e9, 0.005, "Touvron et al. 2023, Table 1 / meta-llama/Llama-2-7b-hf"),
    ("llama2-13b", 13.02e9, 0.005, "meta-llama/Llama-2-13b-hf"),
    ("llama2-70b", 68.98e9, 0.005, "meta-llama/Llama-2-70b-hf"),
    ("llama3-8b", 8.03e9, 0.005, "meta-llama/Meta-Llama-3-8B model card"),
    ("llama3-70b", 70.55e9, 0.005, "meta-llama/Meta-Llama-3-70B model card"),
    ("llama3-405b", 405.9e9, 0.005, "Dubey et al. 2024; meta-llama/Llama-3.1-405B model card"),
    ("mixtral-8x7b", 46.7e9, 0.005, "Jiang et al. 2024, Mixtral of Experts: 47B; HF model card 46.7B"),
    ("mixtral-8x22b", 141e9, 0.005, "mistralai/Mixtral-8x22B-v0.1 model card: 141B"),
    # multi-head latent attention counted as it is (costs/mla.py); the MTP module apart, as published
    ("deepseek-v3", 671e9, 0.001, "DeepSeek-V3 technical report (arXiv 2412.19437) abstract: 671B"),
    ("glm-5", 744e9, 0.001, "GLM-5 release (zai-org/GLM-5 model card): 744B total, 40B active"),
    ("deepseek-v2-lite", 15.7e9, 0.001, "DeepSeek-V2 report (arXiv 2405.04434) appendix B: 15.7B"),
    # the report's 1.04T is 1.3% above what the checkpoint holds: 1,026,470,731,056 elements in its
    # tensors, ~62.5M (6e-5) of them FP8 block scales (weight_scale_inv) rather than parameters
    ("kimi-k2", 1.02647e12, 0.0002, "moonshotai/Kimi-K2-Instruct safetensors (61 files)"),
    ("qwen3-30b-a3b", 30.5e9, 0.002, "Qwen/Qwen3-30B-A3B model card: 30.5B"),
    ("qwen3-235b-a22b", 235e9, 0.001, "Qwen/Qwen3-235B-A22B model card: 235B"),
    ("gpt-oss-120b", 116.83e9, 0.001, "gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B"),
    ("qwen1.5-moe-a2.7b", 14.3e9, 0.005, "Qwen/Qwen1.5-MoE-A2.7B model card: 14.3B"),
    # Gated DeltaNet layers counted as they are (costs/gdn.py); the card rounds to 80B
    ("qwen3-next-80b-a3b", 80e9, 0.005, "Qwen/Qwen3-Next-80B-A3B-Instruct model card: 80B in total"),
]


@pytest.mark.parametrize(("name", "published", "rel", "source"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_model_size_matches_its_publication(name: str, published: float, rel: float, source: str) -> None:
    params = count_parameters(Model.model_validate({"preset": name}))
    assert params == pytest.approx(published, rel=rel), source


# Narayanan et al. 2021, Table 1, "Number of parameters (billion)", printed to one decimal.
NARAYANAN_TABLE_1 = {
    "megatron-1.7b": 1.7, "megatron-3.6b": 3.6, "megatron-7.5b": 7.5, "megatron-18b": 18.4,
    "megatron-39b": 39.1, "megatron-76b": 76.1, "megatron-145b": 145.6, "megatron-310b": 310.1,
    "megatron-530b": 529.6, "megatron-1t": 1008.0,
}


@pytest.mark.parametrize(("name", "billions"), NARAYANAN_TABLE_1.items())
def test_megatron_sizes_round_to_narayanan_table_1(name: str, billions: float) -> None:
    assert round(count_parameters(Model.model_validate({"preset": name})) / 1e9, 1) == billions


@pytest.mark.parametrize(("name", "exact"), [
    ("llama2-7b", 6_738_415_616),  # the Hugging Face checkpoint's parameter count
    ("llama3-8b", 8_030_261_248),
])
def test_llama_sizes_are_exact(name: str, exact: int) -> None:
    assert count_parameters(Model.model_validate({"preset": name})) == exact


def test_every_model_preset_is_checked_against_something() -> None:
    checked = {p[0] for p in PUBLISHED} | set(NARAYANAN_TABLE_1)
    unpublished = {"tiny-gpt", "tiny-llama", "small-gpt", "tiny-moe"}  # plancast's own test sizes
    assert set(catalog.MODELS) - checked == unpublished


def test_lookup_suggests_close_names() -> None:
    with pytest.raises(KeyError, match="did you mean 'llama3-8b'"):
        catalog.lookup(catalog.MODELS, "llama3-8", "model")


def test_lookup_returns_a_copy() -> None:
    preset = catalog.lookup(catalog.CLUSTERS, "dgx-a100-80gb", "cluster")
    preset["num_nodes"] = 99
    assert catalog.CLUSTERS["dgx-a100-80gb"]["num_nodes"] == 1


def _catalog(columns: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "plancast", "catalog"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=60, check=False)


def _listed(stdout: str) -> set[str]:
    names = {*catalog.GPUS, *catalog.CLUSTERS, *catalog.MODELS}
    return {name for name in names if f" {name} " in stdout}


def test_plancast_catalog_lists_every_preset() -> None:
    result = _catalog(columns="200")
    assert result.returncode == 0, result.stderr
    assert _listed(result.stdout) == {*catalog.GPUS, *catalog.CLUSTERS, *catalog.MODELS}
    assert "1.01T" in result.stdout  # megatron-1t's size, humanised
    assert "Traceback" not in result.stdout + result.stderr


def test_plancast_catalog_piped_keeps_full_names() -> None:
    result = _catalog(columns=None)
    assert _listed(result.stdout) == {*catalog.GPUS, *catalog.CLUSTERS, *catalog.MODELS}


def test_plancast_catalog_rejects_an_unknown_kind() -> None:
    result = subprocess.run([sys.executable, "-m", "plancast", "catalog", "tpus"], capture_output=True,
                            text=True, cwd=REPO, timeout=60, check=False)
    assert result.returncode == 2
    assert "error: unknown catalog 'tpus'" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("name", ["dgx-h100-80gb", "hgx-h200", "hgx-h800", "eth-h100-80gb"])
def test_hopper_gemms_keep_the_a100_in_training_to_isolated_ratio(name: str) -> None:
    """Hopper presets scale the A100 fit's GEMM efficiency by the two GPUs' isolated GEMM efficiency
    (80.3% vs 86.9% of peak, simulator/catalog/clusters.py): 0.73, not the A100's 0.79."""
    a100 = Cluster.model_validate({"preset": "dgx-a100-80gb"}).compute
    hopper = Cluster.model_validate({"preset": name}).compute
    assert hopper.matmul_efficiency == pytest.approx(a100.matmul_efficiency * 0.803 / 0.869, abs=1e-3)
    assert hopper.matmul_efficiency < a100.matmul_efficiency
    assert hopper.attention_efficiency == 0.35


def test_a_power_limit_below_the_tdp_lowers_the_clock_and_the_energy() -> None:
    """GPU.power_limit_W: P ~ f^3 at the power limit, so 500 W of 700 W holds (5/7)^(1/3) of the clock."""

    def scenario(limit: float | None) -> Scenario:
        gpu = {**catalog.GPUS["H100-SXM5-80GB"], "name": "H100-SXM5-80GB", "power_limit_W": limit}
        data = {
            "model": {"preset": "llama3-8b", "num_hidden_layers": 2},
            "training": {"seq_len": 2048, "global_batch_size": 8, "total_tokens": 1e9},
            "cluster": {"preset": "dgx-h100-80gb", "gpu": gpu},
        }
        return parse_scenario(data).scenario

    full, capped, above = scenario(None), scenario(500.0), scenario(800.0)
    assert full.cluster.gpu.clock_fraction == 1.0 == above.cluster.gpu.clock_fraction
    assert capped.cluster.gpu.clock_fraction == pytest.approx((500 / 700) ** (1 / 3))
    assert capped.cluster.gpu.board_power_W == 500.0 and above.cluster.gpu.board_power_W == 700.0
    slow, fast = (simulate(s, events=False).summary for s in (capped, full))
    assert slow["step_time_s"] > fast["step_time_s"]
    run = plan_run(capped, slow["step_time_s"])
    assert run is not None and run["power_W"] == 500.0
