# Two entry points do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all install clean

# Every extra the tests use. constraints.txt pins torch (==2.13.0, a CPU build; the train extra
# only bounds it) and the rest to the versions the suite last passed with.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,train,bayes,judges,distributed]'
	touch $(STAMP)

install: $(STAMP)

## Audit the embedded fixture study's headline claim end to end.
demo: $(STAMP)
	$(BIN)/honestci demo

## The default test run (slow tiers excluded).
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not gpu" -n 2

## Every tier but the GPU one.
test-all: $(STAMP)
	$(BIN)/python -m pytest -m "not gpu" -n 2

clean:
	rm -rf $(VENV) honestci-demo .pytest_cache
