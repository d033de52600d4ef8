# The two commands: `make demo` and `make test`. Each creates .venv and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench docs clean venv

$(STAMP): pyproject.toml scripts/setup_venv.sh
	bash scripts/setup_venv.sh "$(PY)" "$(VENV)"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/plancast demo

lint: $(STAMP)
	$(BIN)/ruff check plancast simulator traces runtime dashboard tests benchmarks
	$(BIN)/mypy

test: lint
	bash scripts/setup_test_deps.sh
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks.published_runs
	$(BIN)/python -m benchmarks.sim_speed

docs: $(STAMP)
	$(BIN)/python scripts/gen_scenario_docs.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
