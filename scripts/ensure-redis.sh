#!/usr/bin/env bash
# Installs Debian's redis-server when it is missing. The tests start (and stop) their own
# redis-server on a free loopback port; this script only makes sure the binary exists.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq redis-server >/dev/null
# Debian's package starts a system-wide instance on 6379; the tests do not use it.
($SUDO service redis-server stop || true) >/dev/null 2>&1
