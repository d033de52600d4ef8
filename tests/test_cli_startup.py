"""Start-up: `plancast --help`, `validate` and `simulate --json` load only what they need.

Checked on `sys.modules` of a real `plancast` process after the verb ran (not timed: this machine is
shared). pandas (with numpy and pyarrow) alone used to cost half of `simulate --json`'s import time;
rich a third of `--help`'s (it is loaded when a table or progress bar is printed); torch, Streamlit and
Altair belong to `run` and `dashboard` only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runner import REPO

HEAVY = ("pandas", "pyarrow", "streamlit", "altair", "torch", "rich")
EXAMPLE = str(REPO / "examples" / "gpt3-175b-dgx-a100.toml")
TINY = REPO / "examples" / "tiny-local-cpu.toml"

# Runs the real entry point, then reports which heavy packages the verb loaded (stderr, last line).
PROBE = f"""
import json, sys
sys.argv = ["plancast", *sys.argv[1:]]
from plancast.cli import main
try:
    main()
except SystemExit as e:
    code = e.code or 0
else:
    code = 0
loaded = sorted(m for m in {HEAVY!r} if m in sys.modules)
sys.stderr.write("\\nPROBE " + json.dumps({{"code": code, "loaded": loaded}}) + "\\n")
"""


def loaded_by(*args: str) -> tuple[int, list[str], str]:
    """(exit code, heavy packages in sys.modules, stdout) of `plancast ARGS` in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    probe = json.loads(done.stderr.rsplit("PROBE ", 1)[1])
    return probe["code"], probe["loaded"], done.stdout


@pytest.mark.parametrize(
    "args",
    [("--help",), ("validate", EXAMPLE), ("simulate", EXAMPLE, "--json")],
    ids=["help", "validate", "simulate-json"],
)
def test_light_verbs_do_not_import_heavy_packages(args: tuple[str, ...]) -> None:
    code, loaded, stdout = loaded_by(*args)
    assert code == 0, stdout
    assert loaded == [], f"plancast {' '.join(args)} imported {loaded}"
    if "--json" in args:
        assert json.loads(stdout)["step_time_s"] > 0


def test_the_probe_sees_a_verb_that_needs_pandas(tmp_path: Path) -> None:
    """The check can fail: `simulate --out` writes parquet, so it loads pandas and pyarrow."""
    code, loaded, _ = loaded_by("simulate", str(TINY), "--out", str(tmp_path))
    assert code == 0
    assert {"pandas", "pyarrow", "rich"} <= set(loaded)
