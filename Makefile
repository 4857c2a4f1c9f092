# Two commands do everything on a fresh machine:
#   make train   installs what is missing into .venv, then trains on the built-in synthetic faces
#   make test    installs what is missing, then runs the fast test suite (what CI runs)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=
DIR ?=

.PHONY: install train test test-all test-slow bench sweep-demo report clean help

help:
	@echo "make train [ARGS='head=elastic_arc_plus sigma=0.0175']  train on synthetic faces (CPU is fine)"
	@echo "make test                                              fast test suite (no GPU, no network)"
	@echo "make test-all                                          every test, slow ones included"
	@echo "make bench                                             head, data and verification benchmarks"
	@echo "make sweep-demo                                        the paper's Table I grid on synthetic faces, ranked (~20 min, 2 CPU cores)"
	@echo "make report DIR=logs/train/multiruns/<time>            the Borda-ranked table (.md, .csv, .png) of a sweep"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
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

# 11 small jobs one after the other, then the table of the paper's parameter selection
sweep-demo: $(STAMP)
	@dir=logs/sweep_demo/multiruns/$$(date +%Y-%m-%d_%H-%M-%S); \
	WANDB_SILENT=true $(PY) train.py -m hparams_search=paper_table1 experiment=sweep_demo hydra.sweep.dir=$$dir $(ARGS) \
	  && $(PY) -m elasticface.report $$dir

report:
	@test -n "$(DIR)" || { echo "usage: make report DIR=<sweep directory, e.g. logs/train/multiruns/<date>_<time>>"; exit 2; }
	@$(MAKE) --no-print-directory install
	$(PY) -m elasticface.report $(DIR)

clean:
	rm -rf logs outputs .pytest_cache
