# daVinci-kernel: every set-up step lives here, so `make run` / `make test` work on a fresh machine.
#   make run      create .venv, install, run the whole pipeline on the tiny profile (CPU)
#   make test     create .venv, install, run the test suite
#   make ui       MLflow UI on the project's store
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= tiny
PYTEST_ARGS ?=

.PHONY: venv run test test-fast ui serve gpu-check clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade --quiet pip
	# torch first and pinned, so no resolver ever pulls the multi-GB CUDA build on a CPU box.
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[dev]" --config-settings editable_mode=compat
	@touch $(STAMP)

run: venv
	$(BIN)/davinci-kernel run --profile $(PROFILE)

test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: venv
	$(BIN)/python -m pytest -m "not slow and not integration" $(PYTEST_ARGS)

ui: venv
	$(BIN)/davinci-kernel ui

serve: venv
	$(BIN)/davinci-kernel serve

clean:
	rm -rf .davinci mlruns .pytest_cache
