# daVinci-kernel: every set-up step lives here, so `make run` / `make test` work on a fresh machine.
#   make run      create .venv, install, run the whole pipeline on the tiny profile (CPU)
#   make test     create .venv, install, run the test suite (its 40 slowest steps listed at the end)
#   make ui       MLflow UI on the project's store
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= tiny
PYTEST_ARGS ?=

.PHONY: venv run test test-fast ui serve gpu-check clean

venv: $(STAMP)

# Each install step says what it does and roughly how long it takes (about 5 min in all on a fresh box).
$(STAMP): pyproject.toml
	@echo "[install 1/4] virtual environment in $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "[install 2/4] upgrading pip (seconds)"
	@$(BIN)/python -m pip install --upgrade --quiet pip
	@# torch first and pinned, so no resolver ever pulls the multi-GB CUDA build on a CPU box.
	@echo "[install 3/4] PyTorch 2.13 (the largest download: 1-3 min)"
	@$(BIN)/python -m pip install --quiet --progress-bar on "torch==2.13.0"
	@echo "[install 4/4] daVinci-kernel and its pinned dependencies: Triton, Prefect, MLflow, transformers (2-3 min)"
	@$(BIN)/python -m pip install --quiet -e ".[dev]" --config-settings editable_mode=compat
	@touch $(STAMP)
	@echo "[install] done: $(BIN)/davinci-kernel"

run: venv
	$(BIN)/davinci-kernel run --profile $(PROFILE)

test: venv
	$(BIN)/python -m pytest --durations=40 $(PYTEST_ARGS)

test-fast: venv
	$(BIN)/python -m pytest -m "not slow and not integration" $(PYTEST_ARGS)

ui: venv
	$(BIN)/davinci-kernel ui

serve: venv
	$(BIN)/davinci-kernel serve

clean:
	rm -rf .davinci mlruns .pytest_cache
