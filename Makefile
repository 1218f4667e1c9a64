# The two commands: `make run` and `make test`. Both create .venv when missing.

# The venv's interpreter: PYTHON= when given, else the newest of PYTHONS that runs
# (a pyenv shim of a version that is not selected does not). It is looked for once,
# and only when the venv is made.
PYTHONS := python3.13 python3.12 python3.11
PYTHON ?= $(eval PYTHON := $(firstword $(foreach p,$(PYTHONS),$(shell $(p) -c '' >/dev/null 2>&1 && echo $(p)))))$(PYTHON)
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG := $(if $(wildcard soulbot.yaml),soulbot.yaml,deploy/soulbot.example.yaml)

# The lock: uv.lock, the exact versions that the suite passed on, for every Python from
# 3.11 to 3.13 (one universal resolution). pip installs its exports, with their hashes:
# run.txt holds what `make run` needs, dev.txt that and the test tools; build.txt the
# build backend soulbot itself is installed with. `make upgrade` refreshes them all;
# nothing else does.
LOCK_RUN   := requirements/run.txt
LOCK_DEV   := requirements/dev.txt
LOCK_BUILD := requirements/build.txt
EXPORT      = $(BIN)/uv export --quiet --frozen --no-emit-project --format requirements-txt
COMPILE     = $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes

.PHONY: run test lint bench fake upgrade clean

$(BIN)/python:
	$(if $(PYTHON),,$(error soulbot needs Python 3.11, 3.12 or 3.13: install one, or set PYTHON=...))
	@echo "creating $(VENV) with $(PYTHON) ($$($(PYTHON) --version 2>&1))"
	@$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamps record which install is in the venv; they are redone when the lock changes.
# The locked versions come first, each checked against its hash, then soulbot itself,
# built by the locked backend with nothing more: a dependency missing from the lock
# fails here, not later.
INSTALL_SELF = $(BIN)/python -m pip install --quiet --no-build-isolation --no-deps -e .

$(VENV)/.installed: $(LOCK_RUN) $(LOCK_BUILD) pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK_BUILD) -r $(LOCK_RUN)
	$(INSTALL_SELF)
	touch $@

$(VENV)/.installed-dev: $(LOCK_DEV) $(LOCK_BUILD) pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK_BUILD) -r $(LOCK_DEV)
	$(INSTALL_SELF)
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/soulbot run --config $(CONFIG)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check bot adapters tests bench
	$(BIN)/ruff format --check bot adapters tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Three workers on this two-core machine: much of the suite waits on subprocesses,
# sockets and the database, so a third worker keeps both cores busy.
TEST_WORKERS ?= 3

# The web console's browser test (tests/web/test_browser.py) drives Debian's chromium
# headless through Playwright (its wheel brings the driver, no browser download):
# installed here when it is missing (as root, or with sudo).
test: lint
	@command -v chromium >/dev/null || { echo "installing chromium for the browser test"; \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y chromium; }
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

# Figures, not tests: each benchmark prints one JSON line (and exits 1 on a missed target).
bench: $(VENV)/.installed-dev
	-$(BIN)/python bench/turns.py
	-$(BIN)/python bench/cache.py
	-$(BIN)/python bench/recall.py --data ../shared/data/locomo --data ../shared/data/longmemeval --budget 600
	-$(BIN)/python bench/recall_scale.py
	-$(BIN)/python bench/memory_months.py
	-$(BIN)/python bench/soak.py
	-$(BIN)/python bench/scale.py
	-$(BIN)/python bench/recovery.py
	-$(BIN)/python bench/ambient.py

# The demo model (tests/fakes/demo.py: short "(demo) I heard: ..." answers, the memory
# wiki compiled as a literal model would, valid heartbeat reflections; free as the model
# "demo"), to try soulbot without an API key. It listens on 127.0.0.1:$(PORT): `make fake
# PORT=9000` for another port (0: a free one). Once it listens, it prints its `PORT n` line
# and the command to type in another terminal; a port already taken fails make.
PORT = 8765
NEXT = ANTHROPIC_BASE_URL=http://127.0.0.1:$$port ANTHROPIC_API_KEY=any make run
fake: $(VENV)/.installed-dev
	@$(BIN)/python -m tests.fakes.anthropic_fake --port $(PORT) --demo | { \
	  read -r word port || exit 1; echo "$$word $$port"; \
	  echo "The demo model is listening. In another terminal, in this folder:"; \
	  echo "  $(NEXT)"; cat; }

# Refreshes the lock to the newest versions pyproject.toml allows, installs them and runs
# the whole suite on them: commit requirements/ only when it passes.
upgrade: $(VENV)/.installed-dev
	$(BIN)/uv lock --quiet --upgrade
	$(EXPORT) --extra dev -o $(LOCK_DEV)
	$(EXPORT) -o $(LOCK_RUN)
	$(COMPILE) requirements/build.in --upgrade --constraint $(LOCK_DEV) -o $(LOCK_BUILD)
	$(MAKE) test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
