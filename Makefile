# leakreport — `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
OUT ?= out
DEMO_HOURS ?= 6

.DEFAULT_GOAL := help
.PHONY: help install demo test lint gold eval bench chaos clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

install: $(VENV)/.installed ## create the local virtual environment with everything

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: install ## simulate a fleet, analyze it, write the host and fleet HTML reports and print their paths
	rm -rf $(OUT)/demo-bucket
	$(VENV)/bin/leakreport simulate --scenario all --hours $(DEMO_HOURS) --seed 7 --out $(OUT)/demo-bucket --labels $(OUT)/demo-labels.json
	$(VENV)/bin/leakreport analyze $(OUT)/demo-bucket --format json --out $(OUT)/demo-findings.json --fail-on never
	$(VENV)/bin/leakreport report $(OUT)/demo-findings.json --out $(OUT)/demo-report.html
	$(VENV)/bin/leakreport fleet $(OUT)/demo-bucket --week 2026-W48 --out $(OUT)/demo-fleet.html
	@echo "fleet report: $(abspath $(OUT)/demo-fleet.html)"
	@echo "report: $(abspath $(OUT)/demo-report.html)"

test: install ## run the test suite
	$(PY) -m pytest -q

lint: install ## ruff and mypy
	$(VENV)/bin/ruff check collector analyzer reports simulator leakreport tests bench
	$(VENV)/bin/ruff format --check collector analyzer reports simulator leakreport tests bench
	$(VENV)/bin/mypy

eval: install ## score the analyzer on the labelled scenario suite (out/eval/eval.md)
	$(VENV)/bin/leakreport eval --out $(OUT)/eval

bench: install ## benchmarks side by side: bench/results.json and bench/results.md (not tests)
	$(PY) bench/run_all.py bench

chaos: install ## the collector's fault suite: 200 kill/rotate cycles, bad endpoints, a full disk
	$(PY) bench/chaos.py --cycles 200 --json $(OUT)/chaos.json

gold: install ## regenerate the report gold files (review the diff!)
	LEAKREPORT_UPDATE_GOLD=1 $(PY) -m pytest -q tests/test_report_gold.py tests/test_fleet.py -k "gold"

.PHONY: mutate
MUTMUT_JOBS ?= 2
mutate: install ## mutation tests, slow, not in CI: each rule's SQL against its cases, then mutmut on the collector's importers, log tail (and its rotation set) and writer
	@command -v $(VENV)/bin/mutmut >/dev/null || { echo "make mutate: mutmut is not installed: $(PY) -m pip install 'mutmut>=3.3'"; exit 2; }
	rules=0; $(VENV)/bin/leakreport rules test --mutate || rules=$$?; \
	rm -rf $(OUT)/mutmut && mkdir -p $(OUT)/mutmut && cp -r collector tests $(OUT)/mutmut/ && \
	cp tests/mutmut_setup.cfg $(OUT)/mutmut/setup.cfg && cd $(OUT)/mutmut && \
	$(abspath $(VENV))/bin/mutmut run --max-children $(MUTMUT_JOBS) >mutmut-run.log 2>&1; \
	$(abspath $(VENV))/bin/mutmut results --all true | $(abspath $(PY)) $(CURDIR)/tests/mutmut_score.py; py=$$?; \
	echo "rule mutants: exit $$rules; collector kill rate: exit $$py (surviving mutants: cd $(OUT)/mutmut && mutmut results)"; \
	test $$rules -eq 0 -a $$py -eq 0

clean: ## remove the virtual environment and outputs
	rm -rf $(VENV) $(OUT) .pytest_cache .mypy_cache .ruff_cache
