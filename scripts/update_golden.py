"""Rewrite the golden summaries (tests/data/golden/) from this tree's simulator.

Run only when a change is MEANT to move the model's numbers (a fidelity change, a new example or
published run), then review the diff of tests/data/golden/*.json (one case per line) before committing:
    .venv/bin/python scripts/update_golden.py
tests/simulator/test_golden_summaries.py compares the simulator against these files. Every example and
every published run that parses is written (about two minutes); the test compares a sample of them.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests and benchmarks packages

from tests.golden import cases, outputs, write_group


def main() -> None:
    groups: dict[str, dict[str, dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            groups.setdefault(case.group, {})[case.name] = outputs(case, Path(tmp))
            print(f"{case.group}/{case.name}", flush=True)
    for group, by_name in groups.items():
        print(f"wrote {write_group(group, by_name)} ({len(by_name)} cases)")


if __name__ == "__main__":
    main()
