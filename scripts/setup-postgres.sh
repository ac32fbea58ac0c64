#!/usr/bin/env bash
# Idempotent: installs Debian's PostgreSQL server (initdb, pg_ctl) for the store's integration
# tests, only when it is missing. The tests start their own throwaway cluster; nothing is
# configured or started here. Run as root (or with sudo available).
set -euo pipefail

have_initdb() {
  local bindir
  if bindir=$(pg_config --bindir 2>/dev/null) && [ -x "$bindir/initdb" ]; then return 0; fi
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && return 0
  command -v initdb >/dev/null
}

if have_initdb; then
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "[setup] installing Debian's postgresql (for the store's tests)" >&2
# env: sudo would drop an exported DEBIAN_FRONTEND.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
have_initdb || { echo "[setup] postgresql installed but initdb not found" >&2; exit 1; }
