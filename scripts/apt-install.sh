#!/usr/bin/env bash
# Installs Debian packages for the tests, those not installed yet: `scripts/apt-install.sh PKG...`
# (as root, or run under sudo). Used by .ci/run and scripts/ensure-chromium.sh.
# A second run of either beside this one (or an unattended upgrade) may hold apt's locks: runs
# take turns through one flock, `apt-get install` waits for dpkg's lock, and `apt-get update`
# (which does not wait for its lists lock) is tried again for up to a minute.
set -euo pipefail
exec 9>/tmp/reactor-ci-apt.lock
flock 9
# What the run before this one (which held the lock) installed is not installed again.
need=()
for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p"); done
[ "${#need[@]}" -gt 0 ] || exit 0
for try in 1 2 3 4 5 6 7 8 9 10 11 12; do
  apt-get update -qq && break
  [ "$try" -lt 12 ] || exit 1
  sleep 5
done
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need[@]}" >/dev/null
