# Two entry points do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-e2e test-slow test-all lint install clean

# Every extra the tests use. constraints.txt pins torch (==2.13.0, a CPU build; the train extra
# only bounds it) and the rest to the versions the suite last passed with.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,train,bayes,judges,distributed,inspect]'
	touch $(STAMP)

install: $(STAMP)

## Audit the embedded fixture study's headline claim end to end.
demo: $(STAMP)
	$(BIN)/honestci demo

## The default test run: unit and reference tiers (no slow, end-to-end, training or GPU tier).
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not gpu and not e2e and not training" -n 2

## Command-line end-to-end runs, packaging, and training on tiny models (CI runs this tier too).
test-e2e: $(STAMP)
	$(BIN)/python -m pytest -m "(e2e or training) and not slow and not gpu" -n 2

## The slow tiers: full coverage studies, large fits, slow end-to-end runs.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m "slow and not gpu" -n 2

## Every tier but the GPU one.
test-all: $(STAMP)
	$(BIN)/python -m pytest -m "not gpu" -n 2

## Lint, format and types (CI runs this).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	mkdir -p build/typecheck/honestci
	for name in audit judges training reports fixtures honestci/__init__.py honestci/__main__.py; do \
	  ln -sfn "$(CURDIR)/$$name" build/typecheck/honestci/$$(basename $$name); done
	$(BIN)/mypy

clean:
	rm -rf $(VENV) honestci-demo .pytest_cache
