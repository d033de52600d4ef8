"""Regenerate README.md's accuracy table from the benchmarks' saved figures (benchmarks/results/*.json).

Run after a benchmark saved new figures:  .venv/bin/python scripts/gen_readme_table.py
(tests/test_readme_table.py fails while the README differs from what this writes).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # `benchmarks` is a folder of the checkout, not an installed package

from benchmarks.readme_table import replace_block  # noqa: E402


def main() -> None:
    readme = REPO / "README.md"
    readme.write_text(replace_block(readme.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote the accuracy table of {readme}")


if __name__ == "__main__":
    main()
