"""training.fp8_recipe: each recipe moves the prediction the way its mechanism says (simulator/costs/fp8.py),
and the recipes a GPU or the runtime cannot run are refused by name."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from plancast.simulator.costs.fp8 import FP8_RECIPES, RECIPES, fp8_matmul_efficiency, narrow_kernel_share
from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario, Training
from tests.cli_runner import cli_main


@cache
def scenario(cluster: str, recipe: str | None, pp: int = 4) -> Scenario:
    """Llama 3 70B on 32 GPUs, tp 8 pp 4 (NeMo's FP8 shape); recipe None: bf16 GEMMs."""
    training: dict[str, object] = {"seq_len": 8192, "global_batch_size": 32, "flash_attention": True,
                                   "recompute": "full"}
    if recipe is not None:
        training |= {"fp8": True, "fp8_recipe": recipe}
    data = {
        "model": {"preset": "llama3-70b"},
        "training": training,
        "parallelism": {"tensor_parallel_degree": 8, "pipeline_parallel_degree": pp,
                        "sequence_parallel": True, "framework": "megatron-lm"},
        "cluster": {"preset": cluster, "num_nodes": 4},
    }
    return parse_scenario(data, "recipe").scenario


@cache
def step_s(cluster: str, recipe: str | None, pp: int = 4) -> float:
    return float(simulate(scenario(cluster, recipe, pp), events=False).summary["step_time_s"])


def params_GiB(cluster: str, recipe: str | None) -> float:
    return rank_memory(scenario(cluster, recipe), 1).parameters


def test_the_default_recipe_is_what_training_fp8_always_meant() -> None:
    """tensorwise_delayed: one read, FP8 and its transpose written, 2 bytes a cached weight."""
    assert Training().fp8_recipe == "tensorwise_delayed"
    delayed = RECIPES["tensorwise_delayed"]
    assert delayed.cast_bytes(2) == 2 + 1 + 1 and delayed.weight_copy_bytes == 2 and delayed.peak == "fp8"


@pytest.mark.parametrize("recipe", FP8_RECIPES)
def test_every_recipe_is_faster_than_bf16_gemms(recipe: str) -> None:
    cluster = "dgx-b200" if RECIPES[recipe].peak != "fp8" else "dgx-h100-80gb"
    assert step_s(cluster, recipe) < step_s(cluster, None)


@pytest.mark.parametrize("recipe", ["tensorwise_current", "rowwise"])
def test_a_second_read_of_each_gemm_input_slows_the_step(recipe: str) -> None:
    """Current scaling reduces the input's amax before its cast; rowwise casts it again along the other
    axis."""
    assert RECIPES[recipe].cast_bytes(2) == RECIPES["tensorwise_delayed"].cast_bytes(2) + 2
    assert step_s("dgx-h100-80gb", recipe) > step_s("dgx-h100-80gb", "tensorwise_delayed")


def test_rowwise_keeps_no_fp8_weight_copy() -> None:
    """torchao casts each weight per use: the bf16 parameters alone, 2 bytes a block weight less than TE."""
    bf16, rowwise = params_GiB("dgx-h100-80gb", None), params_GiB("dgx-h100-80gb", "rowwise")
    delayed = params_GiB("dgx-h100-80gb", "tensorwise_delayed")
    assert rowwise == pytest.approx(bf16) and delayed > rowwise


@pytest.mark.parametrize(("recipe", "cluster"), [("blockwise", "dgx-h100-80gb")])
def test_block_scales_cost_a_little_more_than_a_per_tensor_scale(recipe: str, cluster: str) -> None:
    """Same FP8 rate, one read, a scale per block (1/32 byte an element) read and written beside the data:
    a hair slower than delayed per-tensor scaling, and the weight copies a hair larger."""
    delayed = step_s(cluster, "tensorwise_delayed")
    assert delayed < step_s(cluster, recipe) < 1.01 * delayed
    assert params_GiB(cluster, recipe) > params_GiB(cluster, "tensorwise_delayed")


def test_nvfp4_runs_the_fp4_peak_and_halves_the_weight_copies() -> None:
    """FP4 GEMMs at twice the FP8 peak outrun MXFP8 despite the amax pass; FP4 copies are half the size."""
    assert step_s("dgx-b200", "nvfp4") < step_s("dgx-b200", "mxfp8")
    assert params_GiB("dgx-b200", "nvfp4") < params_GiB("dgx-b200", "mxfp8")
    s = scenario("dgx-b200", "nvfp4")
    assert all(op.peak == "nvfp4" for op in layer_forward(Shape.of(s)) if op.fp8)


@pytest.mark.parametrize(("recipe", "says"), [("mxfp8", "no mxfp8"), ("nvfp4", "no nvfp4")])
def test_a_blackwell_recipe_on_hopper_is_refused(tmp_path: Path, recipe: str, says: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(f'[model]\npreset = "tiny-gpt"\n[training]\nfp8 = true\nfp8_recipe = "{recipe}"\n'
                    '[cluster]\npreset = "dgx-h100-80gb"\ngpus_per_node = 1\n')
    code, out, err = cli_main("simulate", str(path))
    assert code == 2 and "training.fp8_recipe" in err and says in err and "Traceback" not in out + err


def test_a_recipe_without_fp8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[model]\npreset = "tiny-gpt"\n[training]\nfp8_recipe = "blockwise"\n'
                    '[cluster]\npreset = "dgx-h100-80gb"\ngpus_per_node = 1\n')
    code, _, err = cli_main("simulate", str(path))
    assert code == 2 and "training.fp8_recipe" in err and "fp8 = true" in err


@pytest.mark.parametrize("recipe", FP8_RECIPES)
def test_run_refuses_every_recipe_naming_it(tmp_path: Path, recipe: str) -> None:
    cluster = "dgx-b200" if RECIPES[recipe].peak != "fp8" else "dgx-h100-80gb"
    path = tmp_path / "r.toml"
    path.write_text(f'[model]\npreset = "tiny-gpt"\n[training]\nseq_len = 128\nfp8 = true\nsteps = 2\n'
                    f'fp8_recipe = "{recipe}"\n[cluster]\npreset = "{cluster}"\ngpus_per_node = 2\n')
    code, _, err = cli_main("run", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and "training.fp8_recipe" in err and recipe in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("cluster", "recipe", "share"),
    [
        # TE's GEMM profiling guide on a B300: MXFP8 0.951 of the FP8 kernel, NVFP4 1.81x it (costs/fp8.py)
        ("dgx-b200", "mxfp8", 6.812 / 7.161),
        ("dgx-b200", "nvfp4", 6.812 / 3.764 * 4500 / 9000),  # FP4 peak 2x FP8: 0.905 of it
        ("hgx-b300", "nvfp4", 6.812 / 3.764 * 4500 / 15000),  # the measured GPU, FP4 peak 3.3x FP8: 0.543
        ("dgx-b200", "tensorwise_current", 1.0),
        ("dgx-h100-80gb", "blockwise", 1.0),
    ],
)
def test_block_scaled_gemms_run_at_their_kernel_rate(cluster: str, recipe: str, share: float) -> None:
    s = scenario(cluster, recipe)
    gpu, compute = s.cluster.gpu, s.cluster.compute
    peak = RECIPES[recipe].peak
    assert narrow_kernel_share(peak, gpu) == pytest.approx(share)
    fp8 = fp8_matmul_efficiency(compute, gpu)
    assert fp8_matmul_efficiency(compute, gpu, peak) == pytest.approx(fp8 * share)


def test_mxfp8_gemms_are_slower_than_per_tensor_ones_on_blackwell() -> None:
    """One read per cast as delayed scaling, a scale per 32 elements, and a GEMM kernel at 0.951 of the
    per-tensor one: slower than tensorwise_delayed, by less than the GEMMs alone would be."""
    delayed = step_s("dgx-b200", "tensorwise_delayed")
    assert delayed < step_s("dgx-b200", "mxfp8") < delayed * 7.161 / 6.812
