#!/usr/bin/env python3
"""A userspace hop that delays IP packets: the delay half of scripts/net/impaired-link.mjs.

This kernel has no netem, so the router namespace of the impaired link sends every forwarded
packet through this process: it creates two TUN devices (A and B, no packet-info header),
and whatever the kernel routes out of A it writes into B after DELAY_MS, and the other way
round. The devices exist while this process holds them open (TUN devices are not persistent),
so they vanish with it. Stdlib only; prints "ready" once both devices exist; exits when stdin
closes (its parent is gone) or on SIGTERM.

    delay-hop.py TUN_A TUN_B DELAY_MS

It counts what it forwarded; on exit it prints one JSON line: {"forwarded": n, "dropped": n}
(dropped: packets the kernel refused to take back, which a real link would lose too).
"""

import collections
import fcntl
import json
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main() -> None:
    name_a, name_b, delay_ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    delay = delay_ms / 1000.0
    a, b = open_tun(name_a), open_tun(name_b)
    peer = {a: b, b: a}
    # Per direction, packets waiting in arrival order: (due time, destination fd, bytes). One
    # constant delay keeps each queue sorted, so a deque is enough (no reordering, as on a wire).
    queues = {a: collections.deque(), b: collections.deque()}
    stats = {"forwarded": 0, "dropped": 0}
    running = True

    def stop(*_args: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    stdin = sys.stdin.fileno()
    print("ready", flush=True)
    while running:
        now = time.monotonic()
        for q in queues.values():
            while q and q[0][0] <= now:
                _, dst, pkt = q.popleft()
                try:
                    os.write(dst, pkt)
                    stats["forwarded"] += 1
                except (BlockingIOError, OSError):
                    stats["dropped"] += 1
        due = [q[0][0] for q in queues.values() if q]
        timeout = max(0.0, min(due) - time.monotonic()) if due else 1.0
        try:
            readable, _, _ = select.select([a, b, stdin], [], [], timeout)
        except InterruptedError:
            continue
        arrived = time.monotonic()
        for fd in readable:
            if fd == stdin:
                if not os.read(stdin, 4096):
                    running = False
                continue
            while True:
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                # What leaves through device X is written into its peer after the delay.
                queues[fd].append((arrived + delay, peer[fd], pkt))
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
