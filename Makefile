# Two commands do everything on a fresh machine:
#   make train   installs what is missing into .venv, then trains on the built-in synthetic faces
#   make test    installs what is missing, then runs the fast test suite (what CI runs)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install train test test-all test-slow bench clean help

help:
	@echo "make train [ARGS='head=elastic_arc_plus sigma=0.0175']  train on synthetic faces (CPU is fine)"
	@echo "make test                                              fast test suite (no GPU, no network)"
	@echo "make test-all                                          every test, slow ones included"
	@echo "make bench                                             head, data and verification benchmarks"

# constraints.txt pins the versions tested together; pyproject.toml only states ranges
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	WANDB_SILENT=true $(PY) train.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -m "not slow and not gpu" -q

test-all: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -m "slow" -q

bench: $(STAMP)
	$(PY) benchmarks/bench_heads.py --classes 20000
	$(PY) benchmarks/bench_data.py
	$(PY) benchmarks/bench_verification.py

clean:
	rm -rf logs outputs .pytest_cache
