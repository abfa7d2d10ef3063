# readtrace: `make demo` and `make test` do all set-up themselves (idempotent).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTHON ?= python3

.PHONY: setup system venv test lint demo bench clean

setup: system venv

# apt packages (bcc, headers, fuse3), /lib/modules symlinks, tracefs: needs root, a no-op when done.
system:
	@if [ "$$(id -u)" = 0 ]; then bash scripts/setup-system.sh; \
	else echo "make: not root: skipping system set-up (run 'sudo make system')"; fi

venv: $(VENV)/.stamp

$(VENV)/.stamp: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	@touch $@

lint: venv
	$(VENV)/bin/ruff check readtrace lab tests examples benchmarks

# pytest exit 5 (no tests collected) is a failure, not a pass.
test: setup lint
	@set -o pipefail; $(VENV)/bin/pytest -rs --durations=40 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc = 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

demo: setup
	$(VENV)/bin/readtrace demo $(DEMO_ARGS)

bench: setup
	$(VENV)/bin/pip install -q -e '.[test,bench]' || true
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
