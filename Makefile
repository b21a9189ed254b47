# The README's two set-up commands: `make demo` (the main job) and `make test` (what CI runs).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test bench lint

# torch first, pinned: its CPU build is what `pip install torch==2.13.0` finds here; an unpinned
# torch pulled in by sentence-transformers would fetch several GB of CUDA packages.
install: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,rl]'
	touch $@

demo: install
	$(BIN)/memupdate demo

# --durations=25: CI's log names the slowest tests, so a test that grows slow is seen where it lands.
test: install
	$(BIN)/pytest --durations=25

bench: install
	$(BIN)/python -m bench.store
	$(BIN)/python -m bench.reward
	$(BIN)/python -m bench.tools
	$(BIN)/python -m bench.rollouts

lint: install
	$(BIN)/ruff check .
