#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver when either is missing. The dashboard's
# browser test (tests/dashboard/test_dashboard_browser.py) drives them through selenium;
# Playwright's own browser download is not used, so no third-party binary is fetched.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
