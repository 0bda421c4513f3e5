# Two commands do all set-up: `make demo` and `make test` (each creates .venv when missing).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= runs/demo

.PHONY: demo test test-all lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sheaf-fmtl demo configs/demo.yaml --out $(OUT) --overwrite

test: $(STAMP)
	$(BIN)/python -m pytest

test-all: $(STAMP)
	$(BIN)/python -m pytest -m ''

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy src

bench: $(STAMP)
	$(BIN)/sheaf-fmtl bench

clean:
	rm -rf $(VENV) runs .pytest_cache
