"""What a user of the installed package meets first: --version, catalog --json, the install line for a
missing optional part, partial GPU overrides on a preset, sweep under a memory cap, readable figures."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from plancast.app import example_path, sig
from tests.cli_runner import REPO, cli_main, cli_subprocess

LLAMA_ON_A100 = '[model]\npreset = "llama3-8b"\n[cluster]\npreset = "dgx-a100-80gb"\n'
BATCH = "[training]\nglobal_batch_size = 8\nseq_len = 2048\n"  # a sweep needs its batch given


def test_version() -> None:
    code, stdout, _ = cli_main("--version")
    assert code == 0
    assert stdout == f"plancast {version('plancast')}\n"


def test_catalog_json() -> None:
    code, stdout, _ = cli_main("catalog", "--json")
    assert code == 0
    catalog = json.loads(stdout)
    assert set(catalog) == {"gpus", "clusters", "models"}
    assert catalog["gpus"]["A100-SXM4-80GB"]["memory_GiB"] == 80
    assert catalog["clusters"]["dgx-a100-80gb"]["gpus_per_node"] == 8
    assert catalog["models"]["llama3-8b"]["num_key_value_heads"] == 8
    assert catalog["models"]["llama3-8b"]["num_parameters"] == pytest.approx(8.03e9, rel=0.005)
    code, stdout, _ = cli_main("catalog", "gpus", "--json")
    assert set(json.loads(stdout)) == {"gpus"}


def test_partial_gpu_table_over_a_preset_keeps_the_preset_gpu(tmp_path: Path) -> None:
    path = tmp_path / "a100-40.toml"
    path.write_text(LLAMA_ON_A100 + "[cluster.gpu]\nmemory_GiB = 40\n")
    code, stdout, stderr = cli_main("validate", str(path))
    assert code == 0, stderr
    gpu = tomllib.loads(stdout)["cluster"]["gpu"]
    assert gpu["memory_GiB"] == 40
    assert gpu["name"] == "A100-SXM4-80GB"
    assert gpu["peak_tflops"]["bf16"] == 312  # A100 datasheet, kept from the preset
    assert gpu["hbm_GBps"] > 1000


def test_sweep_max_memory_gib_only_returns_plans_under_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "llama.toml"
    path.write_text(LLAMA_ON_A100 + BATCH)
    args = ("sweep", str(path), "--gpus", "8", "--json", "--finalists", "4", "--top", "4")
    code, stdout, stderr = cli_main(*args)
    assert code == 0, stderr
    free = json.loads(stdout)
    code, stdout, stderr = cli_main(*args, "--max-memory-gib", "20")
    assert code == 0, stderr
    capped = json.loads(stdout)
    assert capped["plans"] and all(p["peak_memory_gib"] <= 20 for p in capped["plans"])
    assert capped["plans_fitting"] < free["plans_fitting"]
    assert cli_main("sweep", str(path), "--gpus", "8", "--max-memory-gib", "0.01")[0] == 1


def test_sweep_max_memory_gib_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "llama.toml"
    path.write_text(LLAMA_ON_A100 + BATCH)
    code, _, stderr = cli_main("sweep", str(path), "--gpus", "8", "--max-memory-gib", "-3")
    assert code == 2 and "--max-memory-gib" in stderr


def _without(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`plancast ARGS` in a real process where `module` cannot be imported (as when it is not installed)."""
    program = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv = ['plancast', *{list(args)!r}]; "
        "from plancast.cli import main; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=cwd, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("module", "args", "line"),
    [
        ("streamlit", ["dashboard"], "plancast dashboard needs streamlit"),
        (
            "torch",
            ["run", str(REPO / "examples" / "tiny-local-cpu.toml"), "--out", "RUN"],
            "plancast run needs torch",
        ),
        ("torch", ["demo", "--no-dashboard", "--out", "RUN"], "plancast demo needs torch"),
        (
            "torch",
            ["calibrate", "--microbench", "-o", "p.toml"],
            "plancast calibrate --microbench needs torch",
        ),
        ("altair", ["demo", "--out", "RUN"], "needs altair"),
    ],
    ids=["dashboard", "run", "demo", "calibrate", "demo-dashboard"],
)
def test_missing_extra_names_the_install_line(
    tmp_path: Path, module: str, args: list[str], line: str
) -> None:
    extra = "runtime" if module == "torch" else "dashboard"
    result = _without(module, *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert line in result.stderr
    assert f"pip install 'plancast[{extra}]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "RUN").exists()  # checked before anything started or was written


def test_demo_scenario_ships_as_package_data() -> None:
    path = example_path("tiny-local-cpu.toml")
    assert path.read_bytes() == (REPO / "examples" / "tiny-local-cpu.toml").read_bytes()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (0.000412345, "0.000412"),
        (0.0412, "0.0412"),
        (41.23, "41.2"),
        (99.96, "100"),
        (4123.4, "4,123"),
        (3e-6, "3.00e-06"),
        (-0.5, "-0.5"),
    ],
)
def test_sig_keeps_small_figures_readable(value: float, text: str) -> None:
    assert sig(value) == text


def test_simulate_prints_no_zero_tflops_for_a_tiny_model() -> None:
    code, stdout, _ = cli_main("simulate", str(REPO / "examples" / "tiny-local-cpu.toml"))
    assert code == 0
    assert "0.0 TFLOP/s/GPU" not in stdout and "TFLOP/s/GPU" in stdout


@pytest.mark.distributed  # its ranks: one launch at a time (tests/conftest.py)
def test_a_cpu_run_prints_no_framework_noise(tmp_path: Path) -> None:
    """No torchrun OMP banner, no NVML notice on CPU ranks: only plancast's own progress lines."""
    result = cli_subprocess(
        "run",
        str(REPO / "examples" / "tiny-local-cpu.toml"),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "1",
        timeout_s=300,
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "OMP_NUM_THREADS" not in output and "*****" not in output
    assert "NVML" not in output and "telemetry" not in output
    assert (tmp_path / "run" / "measured" / "telemetry.parquet").exists()  # still written, empty


def test_starting_the_dashboard_does_not_import_streamlit_in_the_cli() -> None:
    """streamlit's caches log "No runtime found" when its pages' module is imported outside a server."""
    program = "import sys, plancast.dashboard.serve; print('streamlit' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )
    assert result.returncode == 0
    assert result.stdout.strip() == "False"
    assert result.stderr == ""
