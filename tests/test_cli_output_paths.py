"""An output path that cannot be written is refused before any work, by name, with exit code 2 (never a
traceback after a finished computation); a bad --steps / --world is refused the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_runner import REPO, cli_main

EXAMPLE = str(REPO / "examples" / "tiny-local-cpu.toml")
HF = str(REPO / "tests" / "data" / "importers" / "llama3-8b.config.json")


def cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    a_file = tmp / "notes.txt"
    a_file.write_text("mine\n")
    missing = str(tmp / "no" / "such" / "folder" / "x")
    return {
        "sweep table in a missing folder": (
            ["sweep", EXAMPLE, "--gpus", "2", "--table", f"{missing}.csv"], "the folder"),
        "sweep table that is a folder": (
            ["sweep", EXAMPLE, "--gpus", "2", "--table", str(tmp)], "is a folder"),
        "import into a missing folder": (["import", "hf", HF, "-o", f"{missing}.toml"], "the folder"),
        "calibrate into a missing folder": (
            ["calibrate", "--microbench", "-o", f"{missing}.toml"], "the folder"),
        "simulate into a file": (["simulate", EXAMPLE, "--out", str(a_file)], "is a file"),
        "run into a file": (["run", EXAMPLE, "--out", str(a_file), "--steps", "2"], "is a file"),
        "demo into a file": (["demo", "--no-dashboard", "--out", str(a_file)], "is a file"),
        "import-kineto into a file": (["import-kineto", str(tmp), "--out", str(a_file)], "is a file"),
        "demo with no steps": (
            ["demo", "--no-dashboard", "--steps", "0", "--out", str(tmp / "d")], "--steps"),
        "microbenchmarks on no process": (["calibrate", "--microbench", "--world", "0"], "--world"),
    }


CASES = [
    "sweep table in a missing folder", "sweep table that is a folder", "import into a missing folder",
    "calibrate into a missing folder", "simulate into a file", "run into a file", "demo into a file",
    "import-kineto into a file", "demo with no steps", "microbenchmarks on no process",
]


def test_the_case_list_is_complete(tmp_path: Path) -> None:
    assert sorted(cases(tmp_path)) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_refused_before_any_work(tmp_path: Path, case: str) -> None:
    args, says = cases(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli_main(*args)
    assert code == 2, (case, err)
    assert says in err and "Traceback" not in out + err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, nothing moved
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_users_file_is_replaced_only_with_force(tmp_path: Path) -> None:
    """`import -o` and `calibrate -o` (default ./cluster.toml) replaced an existing file silently."""
    mine = tmp_path / "mine.toml"
    mine.write_text("# mine\n")
    code, _, err = cli_main("import", "hf", HF, "-o", str(mine))
    assert code == 2 and "exists; pass --force" in err and mine.read_text() == "# mine\n"
    code, _, err = cli_main("calibrate", "--microbench", "-o", str(mine))
    assert code == 2 and "exists; pass --force" in err and mine.read_text() == "# mine\n"
    code, _, err = cli_main("import", "hf", HF, "-o", str(mine), "--force")
    assert code == 0, err
    assert "[model]" in mine.read_text()
