"""The rank process of a Python worker: ``python3 -m reactor_worker._rank --reactor-runner=<prefix> --rank=<n>``.

Speaks the parent<->rank protocol of ``packages/distributed/src/protocol.ts`` (version 5) on the
IPC channel Node opened for it (``NODE_CHANNEL_FD``: newline-delimited JSON). A reader thread
takes every message off the channel (a ``cancel`` it handles at once); the main thread runs
``load()`` and the calls, one at a time, in the order they came (with ``maxInFlight`` > 1 the
parent sends the next call while this rank still runs one: it waits in the inbox). The rank never outlives its parent: the channel's end
of file, a failed send, or a change of ``getppid()`` makes it unlink the runner's segments and
kill its own process group.

Only the standard library is imported before ``init``: a missing NumPy is reported to the
parent as a clear ``python_environment`` error instead of a crash.
"""
from __future__ import annotations

import dataclasses
import faulthandler
import importlib
import inspect
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
import typing
from pathlib import PurePath
from typing import Any, Dict, Optional

import reactor_worker
from reactor_worker import DistributedWorker, InjectedFaultError, PythonWorkerError

PROTOCOL_VERSION = 5
# A worker's gpu_busy() is asked at most this often, seconds; a load-progress report at most every PROGRESS_REPORT_S.
GPU_SAMPLE_S = 1.0
PROGRESS_REPORT_S = 0.05
FAULT_CRASH_EXIT_CODE = 86
SHM_DIR = "/dev/shm"


class ProtocolError(Exception):
    code = "ipc_protocol"


_prefix: Optional[str] = None
_leaving = threading.Lock()


def _unlink_prefix(prefix: str) -> None:
    """Unlinks every block of the runner (``/dev/shm/<prefix>*``): here, not in ``_shm``, so an
    orphaned rank reclaims them without importing numpy."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    for f in names:
        if f.startswith(prefix):
            try:
                os.unlink(f"{SHM_DIR}/{f}")
            except OSError:
                pass


def orphaned() -> None:
    """The parent is gone: nobody else will reclaim the runner's blocks, so this rank does, then dies with its group."""
    if not _leaving.acquire(blocking=False):
        return
    if _prefix is not None:
        _unlink_prefix(_prefix)
    try:
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(0)


def _json_safe(v: Any) -> bool:
    try:
        json.dumps(v, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


_SKIP_PROPS = {"args", "with_traceback", "add_note", "__notes__"}


def wire_error(e: BaseException, depth: int = 0) -> dict:
    """An exception as it crosses the process boundary (``WireError`` of ``protocol.ts``)."""
    t = type(e)
    name = t.__name__
    own = getattr(t, "name", None)
    if isinstance(own, str) and t.__module__.startswith("reactor_worker"):
        name = own
    w: Dict[str, Any] = {
        "name": name,
        "type": t.__name__,
        "message": str(e),
        "stack": "".join(traceback.format_exception(t, e, e.__traceback__)).rstrip("\n"),
    }
    code = getattr(e, "code", None)
    if code is not None and _json_safe(code):
        w["code"] = code
    props: Dict[str, Any] = {"pythonType": f"{t.__module__}.{t.__qualname__}"}
    for k, v in getattr(e, "__dict__", {}).items():
        if k.startswith("_") or k in _SKIP_PROPS or k == "code":
            continue
        if _json_safe(v):
            props[k] = v
    w["props"] = props
    cause = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
    if cause is not None and depth < 4:
        w["cause"] = wire_error(cause, depth + 1)
    return w


class Channel:
    """The IPC channel: newline-delimited JSON on the socket Node passed as ``NODE_CHANNEL_FD``."""

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(True)
        self.lock = threading.Lock()
        self.inbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self.on_cancel: Any = None

    def send(self, msg: dict) -> None:
        data = (json.dumps(msg, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                orphaned()

    def read_forever(self) -> None:
        buf = bytearray()
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                orphaned()
                return
            start = len(buf)
            buf += chunk
            at = buf.find(b"\n", start)
            while at >= 0:
                line = bytes(buf[:at])
                del buf[: at + 1]
                self._dispatch(line)
                at = buf.find(b"\n")

    def _dispatch(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            msg = json.loads(line)
        except ValueError:
            self.inbox.put({"t": "__bad__", "raw": line[:200].decode("utf8", "replace")})
            return
        if isinstance(msg, dict):
            if msg.get("t") == "cancel":
                if self.on_cancel is not None:
                    self.on_cancel(msg)
                return
            cmd = msg.get("cmd")
            if isinstance(cmd, str) and cmd.startswith("NODE_"):
                return
        self.inbox.put(msg)


def _hints(fn: Any) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: no conversion
        return {}


def _convert(value: Any, hint: Any, path: str) -> Any:
    """Turns a plain value into the class its parameter is annotated with (dataclass, Path)."""
    if hint is None or value is None:
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        for arg in typing.get_args(hint):
            if arg is not type(None):
                return _convert(value, arg, path)
        return value
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            names = [f.name for f in dataclasses.fields(hint)]
            unknown = [k for k in value if k not in names]
            if unknown:
                raise TypeError(
                    f"{path} has field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} that {hint.__qualname__} does not declare "
                    f"(it declares {', '.join(names) or 'none'}). Send only the dataclass's fields."
                )
            fh = _hints(hint)
            return hint(**{k: _convert(v, fh.get(k), f"{path}.{k}") for k, v in value.items()})
        if issubclass(hint, PurePath) and isinstance(value, str):
            return hint(value)
    return value


def _near_modules(name: str) -> list:
    """Modules on the import path's own folders (PYTHONPATH, not the standard library's) whose name is close to ``name``."""
    import difflib

    found: Dict[str, str] = {}
    for folder in [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            full = os.path.join(folder, entry)
            if entry.endswith(".py"):
                found.setdefault(entry[:-3], full)
            elif os.path.isfile(os.path.join(full, "__init__.py")):
                found.setdefault(entry, full)
    found.pop("reactor_worker", None)
    found.pop("reactor_runtime", None)
    return [(n, found[n]) for n in difflib.get_close_matches(name, list(found), n=1, cutoff=0.75)]


def _torch_device(device: str) -> str:
    # A GPU rank sees only its own GPU (CUDA_VISIBLE_DEVICES): it is cuda:0 there.
    return "cuda:0" if device.startswith("gpu:") else "cpu"


class RankLoop:
    def __init__(self, chan: Channel, prefix: str, rank: int) -> None:
        self.chan = chan
        self.prefix = prefix
        self.rank = rank
        self.worker: Optional[DistributedWorker] = None
        self.init: Optional[dict] = None
        self.faults: Dict[int, str] = {}
        # A ``slow`` fault: from generate() call ``slow[0]`` on, each sleeps ``slow[1]`` ms first.
        self.slow: Optional[tuple] = None
        self.generate_calls = 0
        self.running: Optional[int] = None
        # Calls cancelled while they waited in the inbox: their signal starts aborted.
        self.cancelled: set = set()
        self.progress: Any = None
        self.reader: Any = None
        self.out: Any = None
        # The output rank's result blocks, one per call slot.
        self.outs: Dict[int, Any] = {}
        self.output_rank = 0
        self.input_hint: Any = None
        self.parent_pid = os.getppid()
        self.loading = False
        self.gpu_next: Optional[float] = None
        self.last_report = (-1.0, "")
        chan.on_cancel = self.on_cancel

    # ---- lifecycle -------------------------------------------------------------------------

    def run(self) -> None:
        first = self.chan.inbox.get()
        if not isinstance(first, dict) or first.get("t") != "init":
            self.fatal(ProtocolError(f"Rank {self.rank} expected init first, got {str(first)[:200]}."))
        self.load(first)
        while True:
            msg = self.chan.inbox.get()
            t = msg.get("t") if isinstance(msg, dict) else None
            if t == "call":
                if self.worker is None:
                    self.fatal(ProtocolError(f"Rank {self.rank} got a call before load() succeeded."))
                self.call(msg)
            elif t == "exit":
                self.dispose()
                _flush()
                os._exit(0)
            elif t == "collGo":
                continue
            else:
                self.fatal(ProtocolError(f"Rank {self.rank} received an unknown message from the parent: {json.dumps(msg)[:200]}."))

    def watchdog(self) -> None:
        if os.getppid() != self.parent_pid:
            orphaned()
        if self.gpu_next is not None and time.monotonic() >= self.gpu_next:
            self.sample_gpu()

    def sample_gpu(self) -> None:
        """Asks the worker's gpu_busy() (on the progress thread, at most once a second); an exception or a bad value stops it."""
        self.gpu_next = time.monotonic() + GPU_SAMPLE_S
        worker = self.worker
        if worker is None:
            return
        try:
            ratio = worker.gpu_busy()
        except Exception as e:  # noqa: BLE001 - unknown from now on, said once
            self.gpu_next = None
            sys.stderr.write(f"gpu_busy() raised, GPU busy is unknown from now on: {e!r}\n")
            sys.stderr.flush()
            return
        if ratio is None:
            return
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (0 <= ratio <= 1):
            self.gpu_next = None
            sys.stderr.write(f"gpu_busy() returned {ratio!r}, not a number from 0 to 1 or None; GPU busy is unknown from now on\n")
            sys.stderr.flush()
            return
        self.chan.send({"t": "gpu", "ratio": float(ratio)})

    def report_progress(self, ratio: float, stage: str) -> None:
        if not self.loading:
            return
        now = time.monotonic()
        last_at, last_stage = self.last_report
        if ratio < 1 and stage == last_stage and now - last_at < PROGRESS_REPORT_S:
            return
        self.last_report = (now, stage)
        self.chan.send({"t": "progress", "ratio": ratio, "stage": stage})

    def fatal(self, err: BaseException) -> None:
        self.chan.send({"t": "fatal", "error": wire_error(err)})
        self.dispose()
        _flush()
        os._exit(1)

    def dispose(self) -> None:
        if self.progress is not None:
            self.progress.dispose()
            self.progress = None
        for out in self.outs.values():
            out.dispose()
        if self.reader is not None:
            self.reader.close()

    # ---- load ------------------------------------------------------------------------------

    def load(self, msg: dict) -> None:
        global _prefix
        if msg.get("version") != PROTOCOL_VERSION:
            self.fatal(
                ProtocolError(
                    f"Parent speaks protocol {msg.get('version')}, this Python rank {PROTOCOL_VERSION}: the parent and "
                    f"reactor_worker come from different builds of @reactor/distributed. Use the reactor_worker shipped with it."
                )
            )
        self.init = msg
        _prefix = msg["prefix"]
        for f in msg.get("faults") or []:
            if f.get("rank") == self.rank:
                if f["kind"] == "slow":
                    self.slow = (int(f["call"]), int(f.get("ms") or 500))
                else:
                    self.faults[int(f["call"])] = str(f["kind"])
        try:
            try:
                import numpy  # noqa: F401
            except ImportError as e:
                raise PythonWorkerError(
                    "python_environment",
                    f"NumPy is not installed for {sys.executable} (Python {sys.version.split()[0]}), and Python ranks need it ({e}). "
                    f"Install it (Debian: apt-get install python3-numpy; pip: pip install numpy), or point REACTOR_PYTHON "
                    f"(or pythonWorker(..., {{ interpreter }})) at a Python that has it. `reactor doctor` checks this.",
                ) from None
            from . import _codec, _shm

            self.codec = _codec
            self.progress = _shm.ProgressPublisher(self.prefix, self.rank)
            self.progress.start(self.watchdog)
            self.progress.set_phase("loading")
            reactor_worker._collective_hook = self.progress.collective
            self.reader = _shm.SegmentReader(msg["backend"])
            args = _codec.decode(msg["args"], self.reader.read, copy=True)
            if args is None:
                args = {}
            if not isinstance(args, dict):
                raise PythonWorkerError(
                    "python_value",
                    f"loadArgs reach load(**kwargs) as keyword arguments, so they must be an object; got {type(args).__name__}. "
                    f"Pass loadArgs: {{ name: value }}.",
                )
            cls = self.find_class(msg["moduleUrl"], msg["exportName"])
            try:
                worker = cls()
            except TypeError as e:
                raise PythonWorkerError(
                    "python_worker_invalid",
                    f"{msg['moduleUrl']}:{msg['exportName']}() failed ({e}): a worker needs a no-argument constructor. "
                    f"Take settings in load(**kwargs) instead.",
                ) from e
            worker.rank = self.rank
            worker.world_size = int(msg["worldSize"])
            worker.device = _torch_device(msg["device"])
            worker.gpu_index = int(os.environ["REACTOR_GPU_INDEX"]) if os.environ.get("REACTOR_GPU_INDEX") else None
            worker.signal = reactor_worker.CancelSignal()
            self.output_rank = int(msg.get("outputRank", 0))
            worker.output_rank = self.output_rank
            if self.rank == self.output_rank:
                self.out = self.out_for(0)
                worker._result_allocator = lambda nbytes: self.out.allocate(nbytes)
            self.worker = worker
            worker._progress_reporter = self.report_progress
            params = list(inspect.signature(worker.generate).parameters.values())
            self.input_hint = _hints(worker.generate).get(params[0].name) if params else None
            load_hints = _hints(worker.load)
            kwargs = {k: _convert(v, load_hints.get(k), f"loadArgs.{k}") for k, v in args.items()}
            self.loading = True
            try:
                worker.load(**kwargs)
            finally:
                self.loading = False
            self.progress.set_phase("idle")
            self.chan.send({"t": "loaded"})
            self.gpu_next = time.monotonic()
        except Exception as e:  # noqa: BLE001 - every load failure goes to the parent
            # The parent logs it, with this traceback, whatever the app does with the error (once:
            # not also through this rank's stderr).
            self.chan.send({"t": "loadFailed", "error": self.with_device_hint(wire_error(e))})

    def with_device_hint(self, w: dict) -> dict:
        """CUDA asked for on a CPU rank: the message says which device this rank has and what to write instead."""
        worker = self.worker
        text = w.get("message", "")
        if worker is not None and worker.device == "cpu" and any(k in text for k in ("CUDA", "NVIDIA driver", "cuda")):
            w["message"] = (
                f"{text} (rank {self.rank} runs on CPU: it has no GPU (CUDA_VISIBLE_DEVICES is empty). "
                f"Put tensors on self.device, not 'cuda', so the worker runs on CPU ranks too.)"
            )
        return w

    def find_class(self, module: str, name: str) -> type:
        where = f"{sys.executable} (Python {sys.version.split()[0]})"
        try:
            mod = importlib.import_module(module)
        except SyntaxError as e:
            # The worker's own file does not parse: say which file, which line, and show it.
            text = (e.text or "").rstrip("\n")
            shown_line = f"\n    {text.strip()}" if text.strip() else ""
            raise PythonWorkerError(
                "python_worker_invalid",
                f"The worker module {module} does not parse on rank {self.rank}: {e.msg} in {e.filename}, line {e.lineno}{shown_line}\n"
                f"Fix the syntax error (python3 -m py_compile {e.filename} shows it too).",
            ) from e
        except ModuleNotFoundError as e:
            missing = e.name or ""
            if missing == module or module.startswith(missing + "."):
                top = module.split(".")[0]
                near = _near_modules(top)
                if near:
                    # A typo: the folder is searched already, so adding it is not the fix.
                    raise PythonWorkerError(
                        "python_worker_not_found",
                        f"No Python module named {module!r} for rank {self.rank} ({where}). Did you mean "
                        + " or ".join(f"{n!r} ({path})" for n, path in near)
                        + f"? Fix the name in pythonWorker('{module}:{name}') (or reactor.yaml's runtime.python.worker).",
                    ) from None
                shown = ", ".join(p for p in sys.path[:8] if p)
                raise PythonWorkerError(
                    "python_worker_not_found",
                    f"No Python module named {module!r} for rank {self.rank} ({where}). Add the folder that holds {module.replace('.', '/')}.py "
                    f"to pythonWorker('{module}:{name}', {{ path: [...] }}) (reactor.yaml: runtime.python.path). Searched: {shown}.",
                ) from None
            hint = "apt-get install python3-torch (Debian) or pip install torch" if missing == "torch" else f"pip install {missing}"
            raise PythonWorkerError(
                "python_environment",
                f"The worker module {module} imports {missing}, which is not installed for {where}. Install it ({hint}), "
                f"or point REACTOR_PYTHON (pythonWorker(..., {{ interpreter }})) at a Python that has it. `reactor doctor` checks this.",
            ) from e
        cls = getattr(mod, name, None)
        if cls is None:
            defined = sorted(k for k, v in vars(mod).items() if isinstance(v, type) and issubclass(v, DistributedWorker) and v is not DistributedWorker)
            raise PythonWorkerError(
                "python_worker_not_found",
                f"Module {module} ({getattr(mod, '__file__', '?')}) has no {name}. "
                + (f"DistributedWorker classes it defines: {', '.join(defined)}." if defined else "It defines no DistributedWorker subclass."),
            )
        if not (isinstance(cls, type) and issubclass(cls, DistributedWorker)):
            what = f"a class deriving from {', '.join(b.__name__ for b in cls.__mro__[1:])}" if isinstance(cls, type) else f"a {type(cls).__name__}"
            raise PythonWorkerError(
                "python_worker_invalid",
                f"{module}:{name} is {what}, not a DistributedWorker. Subclass reactor_worker.DistributedWorker "
                f"(or reactor_runtime.distributed.DistributedWorker) and implement load(**kwargs), generate(input) and reset().",
            )
        return cls

    # ---- calls -----------------------------------------------------------------------------

    def out_for(self, slot: int) -> Any:
        """The output rank's result block of call slot ``slot`` (slot 0 keeps the one-slot name)."""
        out = self.outs.get(slot)
        if out is None:
            from . import _shm

            msg = self.init or {}
            what = f"rank {self.rank}'s results" + (f" (call slot {slot})" if slot else "")
            out = _shm.SegmentWriter(msg["backend"], f"{self.prefix}-r{self.rank}-out{slot or ''}", what, msg.get("maxShmBytes"))
            self.outs[slot] = out
        return out

    def on_cancel(self, msg: dict) -> None:
        # A cancel that crossed the rank's answer on the way is simply late; one for a call still
        # in the inbox (maxInFlight > 1) makes it start cancelled.
        cid = msg.get("id")
        if self.running is not None and self.running == cid and self.worker is not None:
            self.worker.signal._abort()
        elif isinstance(cid, int) and (self.running is None or cid > self.running):
            self.cancelled.add(cid)

    def call(self, msg: dict) -> None:
        worker = self.worker
        assert worker is not None
        op = msg["op"]
        worker.signal = reactor_worker.CancelSignal()
        self.running = msg["id"]
        if self.cancelled:
            # In place: the reader thread adds to it meanwhile.
            for c in [c for c in list(self.cancelled) if c <= msg["id"]]:
                if c == msg["id"]:
                    worker.signal._abort()
                self.cancelled.discard(c)
        if self.out is not None:
            self.out = self.out_for(int(msg.get("slot", 0)))
        self.progress.set_phase(op)
        fault = None
        if op == "generate":
            self.generate_calls += 1
            fault = self.faults.get(self.generate_calls)
            if fault:
                sys.stderr.write(f"injected fault: {fault} on rank {self.rank} at generate() call {self.generate_calls}\n")
                sys.stderr.flush()
            if self.slow is not None and self.slow[0] == self.generate_calls:
                sys.stderr.write(f"injected fault: slow ({self.slow[1]} ms before each generate()) on rank {self.rank} from generate() call {self.generate_calls}\n")
                sys.stderr.flush()
        input_hash = None
        result: Any = None
        try:
            if fault == "crash":
                _flush()
                os._exit(FAULT_CRASH_EXIT_CODE)
            elif fault == "stall":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif fault == "shm_full" and self.out is not None:
                self.out.injected_full = True
            if op == "generate":
                if self.out is not None:
                    self.out.reset_allocations()
                value = self.codec.decode(msg["input"], self.reader.read) if msg.get("input") else None
                if fault == "diverge":
                    value = {"injectedDivergence": self.rank, "input": value}
                if self.init and self.init.get("verifyInputs"):
                    input_hash = self.codec.digest(value)
                if fault == "hang":
                    self.progress.keepalive = True
                    threading.Event().wait()
                if fault == "throw":
                    raise InjectedFaultError(f"injected fault: throw on rank {self.rank} at generate() call {self.generate_calls}")
                if self.slow is not None and self.generate_calls >= self.slow[0]:
                    time.sleep(self.slow[1] / 1000)
                value = _convert(value, self.input_hint, "input")
                result = worker.generate(value)
            elif op == "snapshot":
                # Between calls only (the runner runs one call at a time): rank 0's answer is the snapshot.
                if self.out is not None:
                    self.out.reset_allocations()
                result = _snapshot_of(worker)
            elif op == "restore":
                value = self.codec.decode(msg["input"], self.reader.read, True) if msg.get("input") else None
                _restore_into(worker, value)
            else:
                worker.reset()
        except Exception as e:  # noqa: BLE001 - the outcome policy decides
            self.answer({"t": "failed", "id": msg["id"], "error": self.with_device_hint(wire_error(e))}, input_hash)
            return
        if op not in ("generate", "snapshot") or self.rank != self.output_rank:
            self.answer({"t": "result", "id": msg["id"], "value": None}, input_hash)
            return
        try:
            enc = self.codec.encode(result, "result")
            ref = self.out.write(enc) if enc.total > 0 else None
            payload = self.codec.payload_of(enc, ref)
        except Exception as e:  # noqa: BLE001 - undeliverable: reported, the runner stays healthy
            self.answer({"t": "failed", "id": msg["id"], "error": wire_error(e), "transport": True}, input_hash)
            return
        self.answer({"t": "result", "id": msg["id"], "value": payload}, input_hash)

    def answer(self, msg: dict, input_hash: Optional[str]) -> None:
        if input_hash is not None:
            msg["inputHash"] = input_hash
        if self.out is not None:
            self.out.injected_full = False
        self.running = None
        self.progress.set_phase("idle")
        self.chan.send(msg)


class SnapshotUnsupportedError(Exception):
    """The worker has no snapshot()/restore() (code ``snapshot_unsupported``)."""

    code = "snapshot_unsupported"


def _snapshot_of(worker: Any) -> Any:
    fn = getattr(worker, "snapshot", None)
    if not callable(fn):
        raise SnapshotUnsupportedError(
            f"{type(worker).__name__} has no snapshot(): implement snapshot() -> dict of arrays and plain data "
            f"(state_dict style) and restore(snapshot) to take snapshots (docs/snapshots.md)"
        )
    return fn()


def _restore_into(worker: Any, value: Any) -> None:
    fn = getattr(worker, "restore", None)
    if not callable(fn):
        raise SnapshotUnsupportedError(
            f"{type(worker).__name__} has no restore(snapshot): implement it beside snapshot() (docs/snapshots.md)"
        )
    fn(value)


def _flush() -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:  # noqa: BLE001
            pass


def main(argv: list) -> None:
    # A crash (SIGSEGV, SIGABRT...) prints the main thread's Python stack to stderr: the crash
    # report's stderr tail shows where it happened.
    faulthandler.enable(all_threads=False)
    prefix = next((a.split("=", 1)[1] for a in argv if a.startswith("--reactor-runner=")), None)
    rank_text = next((a.split("=", 1)[1] for a in argv if a.startswith("--rank=")), None)
    fd_text = os.environ.pop("NODE_CHANNEL_FD", None)
    os.environ.pop("NODE_CHANNEL_SERIALIZATION_MODE", None)
    if prefix is None or rank_text is None or fd_text is None:
        sys.stderr.write("reactor_worker._rank is started by DistributedRunner with an IPC channel; do not run it directly.\n")
        sys.exit(2)
    chan = Channel(int(fd_text))
    loop = RankLoop(chan, prefix, int(rank_text))
    threading.Thread(target=chan.read_forever, name="reactor-ipc", daemon=True).start()
    try:
        loop.run()
    except SystemExit as e:
        # sys.exit() inside a worker: the process ends with that code, like a TypeScript rank's process.exit().
        loop.dispose()
        _flush()
        os._exit(e.code if isinstance(e.code, int) else (0 if e.code is None else 1))
    except BaseException:  # noqa: BLE001 - a bug in this loop: say so, exit
        traceback.print_exc()
        loop.dispose()
        _flush()
        os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
