"""The README is a landing page: under 150 lines, its accuracy table exactly what the benchmarks saved
(benchmarks/results/*.json, rendered by scripts/gen_readme_table.py), and its links and commands true."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.readme_table import END, START, block, replace_block
from benchmarks.results_io import error_figures, read_result, write_result

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) < 150


def test_the_table_is_what_the_benchmarks_saved() -> None:
    """Fails after a benchmark saved new figures until `scripts/gen_readme_table.py` is run."""
    generated = "\n".join(block())
    assert generated in README, "run .venv/bin/python scripts/gen_readme_table.py"


def test_the_table_quotes_the_saved_figures(tmp_path: Path) -> None:
    """A saved figure appears in the rendered table as a percentage; a benchmark never run says so."""
    figures = {**error_figures([0.1, -0.3]), "core_share_min": 0.4}
    write_result("cpu_out_of_box", "python -m benchmarks.cpu_out_of_box", figures, tmp_path)
    record = read_result("cpu_out_of_box", tmp_path)
    assert record is not None and record["figures"]["mape"] == pytest.approx(0.2)
    text = replace_block(f"intro\n{START}\nold\n{END}\nafter\n", tmp_path)
    row = next(line for line in text.splitlines() if "straight after install" in line)
    assert "| 2 | 20.0% | -30.0% |" in row
    assert "core share down to 0.40: **machine busy: not a test of the model**" in row
    assert "not run on this code yet" in next(line for line in text.splitlines() if "calibrated" in line)
    assert text.startswith("intro\n") and text.endswith("\nafter\n")


def test_a_damaged_results_file_is_read_as_not_run(tmp_path: Path) -> None:
    (tmp_path / "cpu_fidelity.json").write_text("{not json")
    (tmp_path / "peer_speed.json").write_text(json.dumps({"figures": "none"}))
    assert read_result("cpu_fidelity", tmp_path) is None and read_result("peer_speed", tmp_path) is None


def test_every_link_in_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (REPO / link).exists()]
    assert not missing


def test_every_command_in_the_readme_exists() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in set(re.findall(r"(?:^|`)make (\w+)", README, re.M)):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}"
    for module in set(re.findall(r"python -m benchmarks\.(\w+)", README)):
        assert (REPO / "benchmarks" / f"{module}.py").is_file(), module
    for script in set(re.findall(r"(scripts/[\w.]+)", README)):
        assert (REPO / script).is_file(), script
