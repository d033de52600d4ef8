"""The sourced presets (Blackwell, GB200/GB300 NVL72, AMD Instinct): every number names its source, and
a scale-up domain larger than a node (an NVL72 rack) carries the traffic of the groups inside it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from plancast.simulator import catalog
from plancast.simulator.catalog import sourced
from plancast.simulator.cluster import fit_tiers
from plancast.simulator.costs.moe_cp_comm import group_levels_of
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main

CATALOG = Path(catalog.__file__).parent
NEW_CLUSTERS = ("dgx-b200", "hgx-b300", "gb200-nvl72", "gb300-nvl72", "mi300x", "mi325x", "mi355x")


def test_catalog_json_cites_every_number_of_each_new_cluster() -> None:
    code, out, _ = cli_main("catalog", "clusters", "--json")
    assert code == 0
    clusters = json.loads(out)["clusters"]
    for name in NEW_CLUSTERS:
        entry = clusters[name]
        gpu = catalog.GPUS[entry["gpu"]]
        wanted = {*sourced.numbers({k: v for k, v in entry.items() if k != "sources"}),
                  *(f"gpu.{p}" for p in sourced.numbers(gpu))}
        missing = wanted - set(entry["sources"])
        assert not missing, f"{name}: numbers without a source: {sorted(missing)}"
        assert all(src.strip() for src in entry["sources"].values())


def test_a_number_without_a_source_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "gpus.toml"
    bad.write_text('[X]\nhbm_GBps = 8000.0\npeak_tflops.bf16 = { value = 1.0, source = "sheet" }\n')
    with pytest.raises(sourced.UnsourcedNumberError, match=r"hbm_GBps = 8000\.0"):
        sourced.load(bad)
    empty = tmp_path / "clusters.toml"
    empty.write_text('[X]\ntiers = [{ name = "nvlink", size = { value = 8, source = " " } }]\n')
    with pytest.raises(sourced.UnsourcedNumberError, match=r"tiers\[0\].size"):
        sourced.load(empty)


@pytest.mark.parametrize("name", ["gpus.toml", "clusters.toml"])
def test_the_shipped_files_are_fully_sourced(name: str) -> None:
    presets, sources = sourced.load(CATALOG / name)
    raw = tomllib.loads((CATALOG / name).read_text())
    assert set(presets) == set(raw)
    for preset, table in presets.items():
        assert set(sourced.numbers(table)) == set(sources[preset])


@pytest.mark.parametrize(
    ("sizes", "world", "per_node", "fitted"),
    [
        ((8, None), 1024, 8, (8, None)),  # a DGX node divides the world: unchanged
        ((72, None), 1024, 4, (64, None)),  # NVL72 racks: 16 trays of 4 per domain
        ((72, None), 72 * 4, 4, (72, None)),
        ((72, None), 8, 4, (8, None)),  # fewer GPUs than one rack: the domain is all of them
        ((8, None), 4, 4, (4, None)),
        ((8, None), 1, 1, (None,)),  # one GPU: no inner tier left
    ],
)
def test_scale_up_domains_fit_the_world(
    sizes: tuple[int | None, ...], world: int, per_node: int, fitted: tuple[int | None, ...]
) -> None:
    tiers = [{"name": f"t{i}", "size": s, "bandwidth_GBps": 1.0} for i, s in enumerate(sizes)]
    assert tuple(t["size"] for t in fit_tiers(tiers, world, per_node)) == fitted


def _mixtral(cluster: str, nodes: int) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "mixtral-8x7b"},
        "training": {"seq_len": 4096, "global_batch_size": 64, "flash_attention": True, "recompute": "full"},
        "parallelism": {"tensor_parallel_degree": 2, "expert_parallel_degree": 8, "zero_stage": 1,
                        "framework": "megatron-lm"},
        "cluster": {"preset": cluster, "num_nodes": nodes},
    }
    return parse_scenario(data, cluster).scenario


def test_tp_times_ep_beyond_a_node_stays_on_nvl72_nvlink_and_crosses_ib_on_dgx() -> None:
    """tp 2 x ep 8 = 16 GPUs: inside one GB200 NVL72 NVLink domain (64 of a rack's GPUs at 64 GPUs),
    across two DGX B200 nodes. Same GPU count, same Blackwell GPUs' NVLink bandwidth; the DGX's expert
    all-to-alls cross InfiniBand and its step is slower."""
    nvl, dgx = _mixtral("gb200-nvl72", 16), _mixtral("dgx-b200", 8)
    assert nvl.world_size == dgx.world_size == 64
    nvl_links = [lvl.link.bandwidth_Bps for lvl in group_levels_of(nvl, "ep")]
    dgx_links = [lvl.link.bandwidth_Bps for lvl in group_levels_of(dgx, "ep")]
    assert nvl_links == [pytest.approx(900e9 * 0.69)]  # NVLink 5 only
    assert dgx_links == [pytest.approx(900e9 * 0.69), pytest.approx(50e9 * 0.94)]  # NVLink, then IB
    nvl_s = simulate(nvl, events=False).summary["step_time_s"]
    dgx_s = simulate(dgx, events=False).summary["step_time_s"]
    assert dgx_s > nvl_s
