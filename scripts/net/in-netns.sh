#!/bin/sh
# A program inside a network namespace, for launchers that take one executable (playwright's
# executablePath): runs $REACTOR_NETNS_EXEC (default /usr/bin/chromium) with these arguments in
# the namespace $REACTOR_NETNS (scripts/net/impaired-link.mjs makes it).
set -e
[ -n "$REACTOR_NETNS" ] || { echo 'in-netns.sh: set REACTOR_NETNS to the namespace' >&2; exit 2; }
exec ip netns exec "$REACTOR_NETNS" "${REACTOR_NETNS_EXEC:-/usr/bin/chromium}" "$@"
