#!/usr/bin/env bash
# The fresh-machine check: clone HEAD into a temporary folder and run `make test` there
# with an empty pip cache and an empty engine folder (llama-server is built again), as a
# new user meets it.
# Usage: scripts/fresh-check.sh [make target...]   (default: test)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d -t hasten-fresh-XXXXXX)"
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/hasten"
revision="$(git -C "$work/hasten" rev-parse --short HEAD)"
cd "$work/hasten"
started=$(date +%s)
status=0
PIP_CACHE_DIR="$work/pip-cache" HASTEN_WHEEL_DIR="$work/wheels" HASTEN_ENGINE_DIR="$work/engine" make "${@:-test}" || status=$?
echo "fresh-check: make ${*:-test} exited $status after $(( $(date +%s) - started )) s (clone of $revision)"
exit $status
