# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: bootstrap demo test test-quick test-fast test-compose docker up down status bench bench-job bench-jit bench-broker-jit bench-session bench-recovery bench-verify book lock format lint clean

bootstrap: $(VENV)/.bootstrapped

$(VENV)/.bootstrapped: pyproject.toml constraints.txt scripts/bootstrap.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/bootstrap.sh
	touch $@

demo: bootstrap
	$(BIN)/python demo.py

# The tests and eight chapters side by side on two sandboxes (the chapters one queue for both once
# the tests end), then chapters 05, 07 and 10 alone
# (scripts/test_side_by_side.py; docs/decisions/0025-tests-and-chapters-side-by-side.md).
test: bootstrap
	$(BIN)/python scripts/test_side_by_side.py $(PYTEST_ARGS)

# The compose lane: the real docker compose stack (skipped, saying why, where no engine answers).
# Its own ports (+15000), so it can run beside the local test sandbox (+10000): below Linux's
# ephemeral range (32768-60999), where a client's outgoing connection could hold one of them.
test-compose: bootstrap
	OSL_PORT_OFFSET=$${OSL_COMPOSE_PORT_OFFSET:-15000} OSL_STATE_DIR=$(CURDIR)/.sandbox-compose-test \
	  $(BIN)/python -m pytest -m compose tests/compose $(PYTEST_ARGS)

# Engine, compose plugin and base images (installs docker.io and starts dockerd as root on Debian).
docker:
	bash scripts/ensure-docker.sh

# Contributors' lanes (CI still runs everything): the units alone, no services (goal: 2 min);
# then the units, the quick integration tests on one sandbox start, and chapters 01-02 (goal: 6 min).
test-quick: bootstrap
	bash scripts/timed.sh "make test-quick" 120 $(BIN)/python -m pytest -m "not slow and not integration and not notebook" $(PYTEST_ARGS)

test-fast: bootstrap
	bash scripts/timed.sh "make test-fast" 360 $(BIN)/python -m pytest -m "not compose and (not slow or notebook)" tests \
	  notebooks/01-snapshot-update-producers.ipynb notebooks/02-the-stateful-job.ipynb $(PYTEST_ARGS)

up: bootstrap
	$(BIN)/python -m sandbox up

down: bootstrap
	$(BIN)/python -m sandbox down

status: bootstrap
	$(BIN)/python -m sandbox status

bench: bootstrap
	$(BIN)/python bench/startup.py

bench-job: bootstrap
	$(BIN)/python bench/job_bench.py $(BENCH_ARGS)

bench-jit: bootstrap
	$(BIN)/python bench/jit_bench.py $(BENCH_ARGS)

bench-broker-jit: bootstrap
	$(BIN)/python bench/broker_jit_bench.py $(BENCH_ARGS)

bench-session: bootstrap
	$(BIN)/python bench/session_bench.py

# The project's site: the recorded chapters (none is run), the README and docs/: open build/book/index.html.
book: bootstrap
	$(BIN)/python -m book --out build/book

# The one formatter and linter (pyproject.toml [tool.ruff]); tests/test_lint.py checks both.
format: bootstrap
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

lock:
	PYTHON=$(PYTHON) bash scripts/lock.sh

bench-recovery: bootstrap
	$(BIN)/python bench/recovery_bench.py $(BENCH_ARGS)

bench-verify: bootstrap
	$(BIN)/python bench/verify_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build/book
