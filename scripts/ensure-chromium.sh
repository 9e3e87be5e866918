#!/usr/bin/env bash
# The browser tests drive Debian's Chromium through playwright-core (no browser download).
# Installs it when missing and we may (root or passwordless sudo); otherwise says how.
set -euo pipefail
bin="${CHROMIUM_PATH:-/usr/bin/chromium}"
[ -x "$bin" ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else
  echo "Chromium is needed for the browser tests: run 'sudo apt-get install -y chromium' (or set CHROMIUM_PATH)." >&2
  exit 1
fi
echo "Installing Debian's chromium for the browser tests..." >&2
$sudo bash "$(dirname "$0")/apt-install.sh" chromium
