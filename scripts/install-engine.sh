#!/usr/bin/env bash
# Links llama.cpp's own server into the venv as bin/llama-server, from the portable build
# that scripts/llama_server.py makes once per source version and CPU flag set (building it
# first if it is missing). hasten finds it there, beside the venv's python.
# Usage: scripts/install-engine.sh VENV_PYTHON
set -euo pipefail
python="$1"
cd "$(dirname "$0")/.."
binary="$("$python" scripts/llama_server.py)"
ln -sfn "$binary" "$(dirname "$python")/llama-server"
