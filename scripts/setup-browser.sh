#!/usr/bin/env bash
# Idempotent: installs Debian's chromium and chromedriver for the dashboard's browser test
# (tests/e2e/test_dashboard_browser.py drives it headless with Selenium), only when missing.
# Run as root (or with sudo available).
set -euo pipefail

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "[setup] installing Debian's chromium and chromium-driver (for the dashboard's browser test, ~1 min)" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
command -v chromedriver >/dev/null || { echo "[setup] chromium-driver installed but chromedriver not found" >&2; exit 1; }
