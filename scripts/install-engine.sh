#!/usr/bin/env bash
# Installs llama-cpp-python into the venv from the portable wheel that
# scripts/engine_wheel.py builds once per version and CPU flag set (never pip's own
# build: pip would compile it with -march=native and its AMX kernels).
# Usage: scripts/install-engine.sh VENV_PYTHON
set -euo pipefail
python="$1"
cd "$(dirname "$0")/.."
wheel="$("$python" scripts/engine_wheel.py)"
stamp="$(dirname "$python")/../.engine-wheel"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$wheel" ] || ! "$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llama_cpp') is None)"; then
  "$python" -m pip install -q --no-deps --force-reinstall "$wheel"
  echo "$wheel" > "$stamp"
fi
