"""Shared-memory blocks and the progress block, as ``segments.ts`` and ``progress.ts`` lay them out.

Both TypeScript backends keep their blocks in ``/dev/shm`` under the segment's name (``native``:
POSIX ``shm_open``; ``file``: plain files), so a Python rank maps them the same way for both:
``mmap`` of ``/dev/shm/<name>``. Reads are zero-copy either way. The one difference: a ``native``
block (``shm-typed-array``'s layout) starts with its data size as a native ``size_t`` (8 bytes)
and its data follows at offset 8; a ``file`` block is data from offset 0.
"""
from __future__ import annotations

import mmap
import os
import struct
import sys
import threading
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import SharedMemoryCapacityError
from ._codec import Encoded, align

SHM_DIR = "/dev/shm"
INITIAL_SEGMENT_BYTES = 1 << 20
PAGE = 4096
PROGRESS_PHASES = ["idle", "loading", "generate", "reset", "collective", "snapshot", "restore"]
PROGRESS_TICK_S = 0.1
_IDLE = 0
_COLLECTIVE = 4
#: Bytes before the data of a ``native`` block (shm-typed-array's size_t header).
NATIVE_HEADER = 8


def header_bytes(backend: str) -> int:
    return NATIVE_HEADER if backend == "native" else 0


def shm_free_bytes() -> int:
    s = os.statvfs(SHM_DIR)
    return s.f_bavail * s.f_frsize


class SegmentReader:
    """The reading side: maps the parent's blocks. Each read maps the block anew, copy-on-write
    (``ACCESS_COPY``): arrays are writable, a rank's writes stay its own, and a later message
    in the same block is never hidden by a page this rank wrote."""

    def __init__(self, backend: str) -> None:
        self._fds: Dict[str, Tuple[str, int]] = {}
        self.header = header_bytes(backend)

    def read(self, ref: dict) -> Tuple[Any, int]:
        name = ref["seg"]
        length = ref["len"]
        role = name[: name.rfind("-g")]
        cur = self._fds.get(role)
        if cur is None or cur[0] != name:
            if cur is not None:
                os.close(cur[1])
            try:
                fd = os.open(f"{SHM_DIR}/{name}", os.O_RDONLY)
            except FileNotFoundError:
                raise RuntimeError(f"Shared-memory segment {name} does not exist (was it reclaimed after a failure?).") from None
            cur = (name, fd)
            self._fds[role] = cur
        size = os.fstat(cur[1]).st_size
        if length + self.header > size:
            raise RuntimeError(f"Message of {length} bytes overruns segment {name} ({size - self.header} bytes).")
        return mmap.mmap(cur[1], size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE), self.header

    def close(self) -> None:
        for _, fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


class SegmentWriter:
    """The writing side of one role (rank 0's results): a block that grows by creating the next
    generation (at least double) and unlinking the old one, as ``SegmentWriter`` in TypeScript."""

    def __init__(self, backend: str, base_name: str, what: str, max_bytes: Optional[int]) -> None:
        self.header = header_bytes(backend)
        self.base_name = base_name
        self.what = what
        self.max_bytes = max_bytes
        self.generation = 0
        self.name: Optional[str] = None
        self.capacity = 0
        self.view: Optional[np.ndarray] = None
        self.address = 0
        self.bump = 0
        self.injected_full = False

    def _check(self, needed: int) -> Optional[SharedMemoryCapacityError]:
        if self.max_bytes is not None and needed > self.max_bytes:
            return SharedMemoryCapacityError(self.what, needed, self.max_bytes, "are allowed by options.maxShmBytes")
        free = shm_free_bytes()
        if needed > free:
            return SharedMemoryCapacityError(self.what, needed, free, f"are free in {SHM_DIR}")
        return None

    def _grow(self, needed: int) -> None:
        capacity = -(-max(needed, self.capacity * 2, INITIAL_SEGMENT_BYTES) // PAGE) * PAGE
        if self._check(capacity) is not None:
            exact = -(-needed // PAGE) * PAGE
            err = self._check(exact)
            if err is not None:
                raise err
            capacity = exact
        self._release()
        self.generation += 1
        name = f"{self.base_name}-g{self.generation}"
        fd = os.open(f"{SHM_DIR}/{name}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, capacity + self.header)
            mm = mmap.mmap(fd, capacity + self.header, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if self.header:
            struct.pack_into("=Q", mm, 0, capacity)
        self.view = np.frombuffer(mm, dtype=np.uint8, offset=self.header)
        self.address = self.view.ctypes.data
        self.name = name
        self.capacity = capacity

    def _release(self) -> None:
        if self.name is None:
            return
        try:
            os.unlink(f"{SHM_DIR}/{self.name}")
        except OSError:
            pass
        # The mapping is unmapped once the last array a worker kept of it is garbage.
        self.view = None
        self.name = None
        self.capacity = 0

    def allocate(self, nbytes: int) -> Optional[np.ndarray]:
        """``nbytes`` of the block for a result array (a bump allocation); None when it cannot grow."""
        if self.injected_full:
            return None
        at = self.bump
        end = at + nbytes
        try:
            if self.view is None or end > self.capacity:
                self._grow(end + INITIAL_SEGMENT_BYTES)
        except SharedMemoryCapacityError:
            return None
        self.bump = align(end)
        return self.view[at:end]

    def reset_allocations(self) -> None:
        self.bump = 0

    def _place(self, enc: Encoded) -> None:
        base, cap = self.address, self.capacity
        fixed = []
        fixed_end = 0
        for a in enc.arrays:
            addr = a.ctypes.data if a.size else -1
            if self.view is not None and base <= addr < base + cap:
                off = addr - base
                fixed.append(off)
                fixed_end = max(fixed_end, off + a.nbytes)
            else:
                fixed.append(None)
        cursor = align(fixed_end)
        for i, a in enumerate(enc.arrays):
            off = fixed[i]
            if off is None:
                off = cursor
                cursor = align(cursor + a.nbytes)
            enc.set_offset(i, off)
        enc.total = max(cursor, fixed_end)

    def write(self, enc: Encoded) -> dict:
        if self.injected_full:
            raise SharedMemoryCapacityError(self.what, enc.total, 0, f"are free in {SHM_DIR} (injected shm_full fault)")
        if self.view is not None:
            self._place(enc)
        if enc.total > self.capacity:
            self._grow(enc.total)
            self._place(enc)
        view = self.view
        assert view is not None
        for a, off in zip(enc.arrays, enc.offsets):
            n = a.nbytes
            if n == 0 or (a.ctypes.data == self.address + off):
                continue
            view[off : off + n] = a
        return {"seg": self.name, "len": enc.total}

    def dispose(self) -> None:
        self._release()


class ProgressPublisher:
    """This rank's progress block: ``u32`` counter, ``u32`` phase (``progress.ts``).

    The counter advances every 100 ms while the main thread makes progress: a ticker thread
    checks whether the main thread's innermost Python frame moved, or its CPU clock advanced
    (it computes: Python bytecode, or a long native call such as a matmul). A rank stopped
    (SIGSTOP), blocked (a sleep, a lock, a peer it waits for), or deadlocked stops advancing it,
    as a TypeScript rank whose event loop is blocked does. While idle (no call) it advances on
    every tick, as a TypeScript rank's does. Inside a ``torch.distributed``
    collective (labelled by :func:`reactor_worker.init_distributed`) only the frame counts, so a
    rank spin-waiting in one is still named, in phase ``collective``.
    """

    def __init__(self, prefix: str, rank: int) -> None:
        self.path = f"{SHM_DIR}/{prefix}-r{rank}-progress"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(self.fd, 8)
        self.counter = 0
        self.phase = 0
        self.saved_phase = 0
        #: While set, the counter advances whatever the main thread does (an injected ``hang``).
        self.keepalive = False
        self._main = threading.main_thread().ident
        self._last: Any = None
        try:
            self._clock: Optional[int] = time.pthread_getcpuclockid(self._main)  # type: ignore[arg-type]
            self._cpu = time.clock_gettime(self._clock)
        except (AttributeError, OSError):
            self._clock = None
            self._cpu = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._publish()

    def start(self, watchdog: Any) -> None:
        t = threading.Thread(target=self._run, args=(watchdog,), name="reactor-progress", daemon=True)
        t.start()

    def _sample(self) -> Any:
        f = sys._current_frames().get(self._main)
        if f is None:
            return None
        return (id(f.f_code), f.f_lasti, id(f))

    def _run(self, watchdog: Any) -> None:
        while not self._stop.wait(PROGRESS_TICK_S):
            watchdog()
            s = self._sample()
            computing = False
            if self._clock is not None:
                try:
                    cpu = time.clock_gettime(self._clock)
                except OSError:
                    cpu = self._cpu
                # At least a fifth of the tick on the CPU: computing, not waiting.
                computing = cpu - self._cpu >= PROGRESS_TICK_S / 5 and (self.phase & 0xFF) != _COLLECTIVE
                self._cpu = cpu
            # Between calls the main thread waits for the parent's next message: healthy, so the
            # counter advances as a TypeScript rank's event-loop timer does (stall detection
            # watches calls, not idleness). A stopped process (SIGSTOP, a debugger) runs no ticker
            # either, so an idle rank that is frozen is still named.
            idle = self.phase == _IDLE
            if self.keepalive or idle or computing or s != self._last:
                self._last = s
                with self._lock:
                    self.counter = (self.counter + 1) & 0xFFFFFFFF
                    self._publish()

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = PROGRESS_PHASES.index(phase)
            self._publish()

    def collective(self, inside: bool, peer: Optional[Tuple[str, int]] = None) -> None:
        """Enters (``inside``) or leaves a ``torch.distributed`` call; ``peer`` names a send's or a
        receive's peer: ``("send", 1)``, published in bits 8-16 of the phase word (``progress.ts``)."""
        with self._lock:
            if inside:
                self.saved_phase = self.phase
                self.phase = PROGRESS_PHASES.index("collective")
                if peer is not None and 0 <= peer[1] < 255:
                    self.phase |= (peer[1] + 1) << 8 | (0x10000 if peer[0] == "recv" else 0)
            else:
                self.phase = self.saved_phase
            self._publish()

    def _publish(self) -> None:
        try:
            os.pwrite(self.fd, struct.pack("<II", self.counter, self.phase), 0)
        except OSError:
            pass

    def dispose(self) -> None:
        self._stop.set()
        try:
            os.close(self.fd)
            os.unlink(self.path)
        except OSError:
            pass
