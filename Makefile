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
	@echo "== lint: ruff, then mypy"
	$(BIN)/ruff check plancast simulator traces runtime dashboard tests benchmarks
	$(BIN)/mypy

# two workers, with every test that starts ranks or a server kept on one of them in turn
# (tests/conftest.py); how long it takes, and on what machine: docs/contributing.md
test: lint
	@echo "== test dependencies: chromium (browser test), slurm-wlm and munge (SLURM tests); apt-get, only as root"
	bash scripts/setup_test_deps.sh
	@echo "== the test suite on 2 workers (pytest-xdist): one takes the tests that start ranks or a server, one"
	@echo "   at a time, while the other takes the rest; a dot per test, the slowest 15 listed at the end"
	@start=$$(date +%s); $(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations 15; rc=$$?; \
	echo "== the test suite took $$(( $$(date +%s) - start )) s (exit $$rc; load now: $$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"; \
	exit $$rc

bench: $(STAMP)
	$(BIN)/python -m benchmarks.published_runs
	$(BIN)/python -m benchmarks.sim_speed

docs: $(STAMP)
	$(BIN)/python scripts/gen_scenario_docs.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
