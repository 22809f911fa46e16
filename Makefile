# UndoLog — the two commands a newcomer needs:
#   make demo   run the demo (a throwaway PostgreSQL unless UNDOLOG_DSN is set); installs
#               only the PostgreSQL server and the package, not the development stack
#   make test   every check: lint (sqlfluff, ruff, mypy), pytest, pgTAP + plpgsql_check, docs
# and for what comes next:
#   make db       a local PostgreSQL that stays (in $(DB_DIR)); prints the export line
#   make db-stop  stop it (the data stays; rm -rf .pgdata removes it)
#   make docs     the documentation site, warnings as errors, into site/
#   make dist     the wheel and sdist into dist/ (pip install dist/undolog-*.whl)
#   make bench    N agents against the floor and DBOS (BENCH_ARGS=--quick: short)
#   make bench-ab  what an engine change saved: server CPU per call, BASE=REV vs the tree
#   make bench-profile   where a journaled call's time goes
#   make bench-c  issue 23's hot path in C, beside the engine (optional: gcc, server headers)
#   make generate the sync modules from their async sources (make lint checks them)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

VENV ?= .venv
PY := $(VENV)/bin/python
# The demo needs only the package; the checks need every extra and tool (.[dev]).
CORE_STAMP := $(VENV)/.core-stamp
STAMP := $(VENV)/.installed-stamp
BUILD_STAMP := $(VENV)/.build-stamp
# Starts a private PostgreSQL, runs the command with PG* and UNDOLOG_DSN set, stops it.
WITH_PG := $(PY) tools/pgcluster.py run --
# The reference MCP servers the proxy's tests run for real (npm; versions pinned in
# tools/mcp-reference-servers.json).
MCP_SERVERS := .cache/mcp-servers
MCP_STAMP := $(MCP_SERVERS)/.installed-stamp
# Where `make db` keeps its cluster.
DB_DIR ?= .pgdata

.PHONY: test demo deps demo-deps system-deps system-deps-demo lint lint-sql lint-py pytest pgtap bench bench-ab bench-profile bench-c clean generate \
	dashboard-demo dashboard-screenshot db db-stop docs dist

# The install first, alone (the venv needs the system's python3-venv); then the lint and
# the pgTAP suites two at once, each one process on one core (each target's output whole,
# when it ends); then pytest, which keeps both cores busy alone, and the docs.
test:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint pgtap
	@$(MAKE) --no-print-directory -j1 pytest docs

demo: demo-deps
	@if [ -n "$${UNDOLOG_DSN:-}" ]; then \
		echo "make demo: on the database of UNDOLOG_DSN (unset UNDOLOG_DSN: a throwaway PostgreSQL)" >&2; \
		$(PY) -m undolog.demos; \
	else $(WITH_PG) $(PY) -m undolog.demos; fi

# The dashboard filled with the demo's sessions, on http://127.0.0.1:8765/ (Ctrl-C stops it).
dashboard-demo: deps
	@if [ -n "$${UNDOLOG_DSN:-}" ]; then $(PY) -m undolog.dashboard --demo; \
	else $(WITH_PG) $(PY) -m undolog.dashboard --demo; fi

# Regenerates docs/img/dashboard.png from the browser test's inbox screenshot.
dashboard-screenshot: deps
	UNDOLOG_DOCS_SCREENSHOT=1 $(VENV)/bin/pytest -q tests/dashboard/test_dashboard_browser.py -k approver

deps: system-deps $(STAMP) $(MCP_STAMP)

# What the demo runs on: the PostgreSQL server and the package with its four dependencies.
demo-deps: system-deps-demo $(CORE_STAMP)

# PostgreSQL binaries, pgTAP, plpgsql_check, pg_prove, Chromium from Debian's packages when
# missing; for the demo only python3-venv and the PostgreSQL server.
system-deps:
	@bash tools/install-system-deps.sh --for test

system-deps-demo:
	@bash tools/install-system-deps.sh --for demo

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# pip without --quiet: a line a package, and a bar for a long download.
$(CORE_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing undolog and its dependencies (psycopg, psycopg-pool, blake3, rfc8785) into $(VENV)"
	$(VENV)/bin/pip install --disable-pip-version-check --progress-bar on -e .
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing undolog with every extra and the development tools into $(VENV) (a few minutes on a first run)"
	$(VENV)/bin/pip install --disable-pip-version-check --progress-bar on -e '.[dev]'
	touch $@ $(CORE_STAMP)

$(MCP_STAMP): tools/mcp-reference-servers.json tools/install-mcp-servers.sh
	@bash tools/install-mcp-servers.sh $(MCP_SERVERS)
	touch $@

lint: lint-sql lint-py

lint-sql: deps
	$(VENV)/bin/sqlfluff lint sql/

lint-py: deps
	$(PY) tools/async_to_sync.py --check
	$(VENV)/bin/ruff check python tests bench tools examples
	$(VENV)/bin/ruff format --check python tests bench tools examples
	$(VENV)/bin/mypy

# The sync modules generated from their async sources (tools/async_to_sync.py).
generate: deps
	$(PY) tools/async_to_sync.py

# In PYTEST_WORKERS processes (pytest-xdist), each starting its own throwaway cluster
# (tests/conftest.py). Three on two cores: much of the suite waits (servers, leases,
# request bounds, browsers) rather than computes; a clean clone's run took 12:35 at
# three where the last ones at two took 15-20 minutes. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 3
pytest: deps
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS)

# pgTAP suites (including plpgsql_check over every function) through pg_prove;
# PGTAP="pgtap/22_intercept.sql" runs only those files.
pgtap: deps
	$(WITH_PG) bash tools/run-pgtap.sh $(PGTAP)

# stdout is only the `export UNDOLOG_DSN=...` line: eval "$$(make -s db)" sets it.
db: system-deps-demo
	@python3 tools/pgcluster.py start --dir $(DB_DIR)

db-stop:
	@python3 tools/pgcluster.py stop --dir $(DB_DIR)

docs: deps
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Only `build` (it builds in an isolated environment of its own): a wheel for your own
# project needs none of the test stack that `make deps` installs.
dist: $(BUILD_STAMP)
	$(PY) -m build --outdir dist .

$(BUILD_STAMP): | $(VENV)/bin/python
	$(VENV)/bin/pip install --disable-pip-version-check "build>=1.2"
	touch $@

# N agents (1, 4, 16, 64) side by side: floor, SQL durable/async, decorator, replay, DBOS;
# its own throwaway cluster (pg_stat_statements preloaded). make bench BENCH_ARGS=--quick
# Then what the history's hash chain adds to a new call (server CPU µs).
bench: deps
	$(PY) bench/bench_agents.py $(BENCH_ARGS)
	$(PY) bench/bench_chain.py

# Server CPU and WAL per new call of the engine at BASE against the working tree (and the
# floor), measured inside the server: what an engine change saved. make bench-ab BASE=REV
BASE ?= HEAD
bench-ab: deps
	$(PY) bench/bench_engine_ab.py $(BASE) .

# Where a journaled call's time goes: server µs per statement, ablations, client CPU.
bench-profile: deps
	$(PY) bench/bench_profile.py $(BENCH_ARGS)

# Issue 23's hot path as C functions below the executor, beside the floor, the engine and
# plain SQL. Builds its .so at run time; without gcc or postgresql-server-dev-15 it says
# what to install and exits 0. Not part of make bench, which needs no compiler.
bench-c: deps
	$(PY) bench/bench_c_hot_path.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site dist .cache
