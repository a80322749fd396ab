# One command each: `make demo` and `make test` install first when needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONSTRAINTS ?= constraints.txt
STAMP := $(VENV)/.installed

.PHONY: install test lint format demo clean

install: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[dev]"
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest -q -n 2 tests

lint: install
	$(BIN)/ruff check seq2seq_attn tests scripts
	$(BIN)/ruff format --check seq2seq_attn tests scripts

format: install
	$(BIN)/ruff check --fix seq2seq_attn tests scripts
	$(BIN)/ruff format seq2seq_attn tests scripts

clean:
	rm -rf $(VENV) build *.egg-info
