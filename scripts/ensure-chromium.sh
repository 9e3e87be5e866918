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
# A second `pnpm test` (or .ci/run) beside this one may hold apt's locks: take turns through the
# lock .ci/run uses, try `apt-get update` (which does not wait for its lists lock) for up to a
# minute, and let the install wait for dpkg's lock.
exec 9>/tmp/reactor-ci-apt.lock
flock 9
[ -x "$bin" ] && exit 0
for try in 1 2 3 4 5 6 7 8 9 10 11 12; do
  $sudo apt-get update -qq && break
  [ "$try" -lt 12 ] || exit 1
  sleep 5
done
DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium >/dev/null
