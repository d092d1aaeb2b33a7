# hasten: `make serve` runs the gateway on embedded defaults; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: serve test lint typecheck pytest venv dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamp files make installs idempotent: pip only runs again when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.installed-dev

serve: $(VENV)/.installed
	$(BIN)/hasten serve --host $(HOST) --port $(PORT) $(if $(CONFIG),--config $(CONFIG))

LINT_PATHS := src tests $(wildcard bench)

lint: dev
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

typecheck: dev
	$(BIN)/mypy

pytest: dev
	bash scripts/ensure-redis.sh
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck pytest

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
