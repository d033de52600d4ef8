"""Regenerate docs/scenario.md and docs/scenario.schema.json from the pydantic models.

Run after changing a field in simulator/scenario.py:  .venv/bin/python scripts/gen_scenario_docs.py
(tests/test_docs.py fails while the committed files differ from what this writes).
"""

from __future__ import annotations

import json
from pathlib import Path

from plancast.simulator.scenario_docs import scenario_json_schema, scenario_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs"


def main() -> None:
    (DOCS / "scenario.md").write_text(scenario_markdown(), encoding="utf-8")
    (DOCS / "scenario.schema.json").write_text(
        json.dumps(scenario_json_schema(), indent=2) + "\n", encoding="utf-8"
    )
    print(f"wrote {DOCS / 'scenario.md'} and {DOCS / 'scenario.schema.json'}")


if __name__ == "__main__":
    main()
