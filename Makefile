# Two commands on a fresh machine: `make train` and `make test`. Both create .venv if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The PyTorch build to install when the environment has none. The project itself accepts any
# torch>=2.4; this pin picks a build that is quick to fetch (override: make train TORCH=torch).
TORCH ?= torch==2.13.0
ARGS ?=

.PHONY: setup train test test-fast fuzz lint
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev,cluster,tune,export]"
	touch $@

train: setup
	$(PY) scripts/train.py $(ARGS)

# One pytest process per core (pytest-xdist), each file's tests in one process, one torch thread
# each, the files with real training runs first (tests/conftest.py).
test: setup
	$(PY) -m ruff check src scripts tests
	$(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

# The inner loop: everything but the real training runs (@pytest.mark.slow); CI runs `make test`.
test-fast: setup
	$(PY) -m ruff check src scripts tests
	$(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder -m "not slow"

# The fuzz suites with 20 times the cases of `make test`, freshly drawn on every run.
fuzz: setup
	MINIMT_FUZZ=long $(PY) -m pytest -q tests/test_fuzz_inputs.py tests/test_fuzz_config.py \
		tests/faults/*_fuzz.py tests/test_run_life_machine.py

lint: setup
	$(PY) -m ruff check src scripts tests
	$(PY) -m ruff format --check src scripts tests
