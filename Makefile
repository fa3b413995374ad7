# Cairn: every target bootstraps what it needs. Only Python 3.11+, git, make and Node 20 are assumed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NODE_DIR   := .tools/node
NODE_STAMP := $(NODE_DIR)/.installed
UV_VERSION := 0.13.9
# Python writes the bytecode of what it imports (a shell that sets PYTHONDONTWRITEBYTECODE would make every
# process of the test suite, and every server it starts, compile its modules from source again: a quarter
# less CPU on a spawn-heavy part of the suite, measured on a fresh clone).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test test-serial test-random stress bench node-tools browser typecheck venv prepare precollect clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required") if sys.version_info < (3, 11) else None'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# uv installs the same pinned set about four times faster than pip; pip does it if uv cannot be had
	( $(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION) \
	  && $(VENV)/bin/uv pip install --quiet --python $(PY) -c constraints.txt -e '.[test]' ) \
	|| $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

# Node 22, the MCP conformance suite and the Inspector CLI, pinned by tools/node/package-lock.json.
node-tools: $(NODE_STAMP)

$(NODE_STAMP): tools/node/package.json tools/node/package-lock.json
	mkdir -p $(NODE_DIR)
	cp tools/node/package.json tools/node/package-lock.json $(NODE_DIR)/
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	$(NODE_DIR)/node_modules/.bin/node --version
	touch $(NODE_STAMP)

# Headless Chromium for the brk web page test. Installed from Debian's packages when we are root
# with apt-get; elsewhere the test skips with a clear reason, so this step never fails the build.
# zsh and fish likewise, for the shell completion tests (bash is always there).
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v zsh >/dev/null 2>&1 && command -v fish >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium zsh fish >/dev/null) \
		|| echo "note: could not install chromium, zsh and fish; the browser and completion tests will skip"; \
	else echo "note: chromium, zsh or fish not installed; the browser or completion tests will skip"; fi

demo: $(STAMP)
	$(PY) -m cairn_servers.demo

# The suite on one pytest-xdist worker per core (JOBS=N for another count); rules for xdist-safe tests
# are in tests/_workers.py. `make test-serial` runs it in one process, in file order.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
XDIST := -n $(JOBS) --dist loadfile

# The set-up steps side by side: the venv then mypy, the Node tools, the browser check, and one collection
# of the tests (it writes the bytecode and pytest's rewritten test modules once, before the workers start
# and would each compile them again; its errors, if any, are reported by the run itself).
prepare:
	@$(MAKE) --no-print-directory -j3 --output-sync=target typecheck $(NODE_STAMP) browser precollect

precollect: $(STAMP)
	@$(PY) -m pytest -qq --collect-only -p no:xdist > /dev/null 2>&1 || true

test: prepare
	$(PY) -m pytest -q $(XDIST)

test-serial: prepare
	$(PY) -m pytest -q -p no:xdist

# The whole suite in a random order across all files: every test must pass alone and after any other.
# The seed is printed; `make test-random SEED=N` repeats that order. The workers take the tests of that
# one order in turn (--dist load), so which worker runs which test varies from run to run;
# `make test-random SEED=N JOBS=0` runs exactly that order in one process.
ifndef SEED
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
test-random: $(STAMP) $(NODE_STAMP) browser
	@echo "random order seed: $(SEED) (make test-random SEED=$(SEED) repeats this order)"
	$(PY) -m pytest -q -n $(JOBS) --dist load --random-order-bucket=global --random-order-seed=$(SEED)

# Strict mypy over the package and the tests (settings in pyproject.toml [tool.mypy]).
typecheck: $(STAMP)
	$(PY) -m mypy src/cairn_servers tests

stress: $(STAMP) $(NODE_STAMP)
	CAIRN_STRESS=1 $(PY) -m pytest -q -m "not node" tests

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) .tools .pytest_cache
