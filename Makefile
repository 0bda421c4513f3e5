# Two commands do all set-up: `make demo` and `make test` (each creates .venv when missing).
# `make docs` adds the documentation tools to .venv and builds the site into site/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
OUT ?= runs/demo

.PHONY: demo test test-slow test-all lint docs bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,dev]'
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,dev,docs]'
	touch $(DOCS_STAMP)

demo: $(STAMP)
	$(BIN)/sheaf-fmtl demo configs/demo.yaml --out $(OUT) --overwrite

# The default suite on a worker per CPU, at most four (pytest-xdist); benchmarks/suite_time.py times the same.
TEST_WORKERS := -n logical --maxprocesses 4

test: $(STAMP)
	$(BIN)/python -m pytest $(TEST_WORKERS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

test-all: $(STAMP)
	$(BIN)/python -m pytest -m ''

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy src

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/sheaf-fmtl bench

clean:
	rm -rf $(VENV) runs site .pytest_cache
