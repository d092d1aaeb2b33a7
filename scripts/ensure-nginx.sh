#!/usr/bin/env bash
# Installs Debian's nginx when it is missing. The fleet tests and bench/fleet/fleet.py run their own
# unprivileged nginx from a temporary directory (tests/support/fleet.py) as the load balancer
# in front of the gateway replicas; this script only makes sure the binary exists.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Debian 12's nginx-light is only a transitional package for nginx (plus the echo module).
$SUDO apt-get install -y -qq -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  nginx >/dev/null
# The system-wide nginx service (if the package started one) is left alone: the tests run
# their own on free loopback ports and never use or change it.
