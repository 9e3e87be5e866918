"""``python -m reactor_worker run module:Class --input in.json [--world-size 2]``: a worker without Node.

Runs ``load(**load_args)`` then ``generate(input)`` of a :class:`reactor_worker.DistributedWorker`
in this process (rank 0) and, with ``--world-size N``, in N-1 more processes of this Python (ranks
1..N-1), with the environment ``torch.distributed`` needs (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), so ``init_distributed()`` works as under the runner. Rank 0
prints what its result holds: each field's type and, for arrays and tensors, dtype and shape.

Rank 0 is this process, in the foreground: ``breakpoint()`` in the worker, or
``python -m pdb -m reactor_worker run ...``, stops there. The inputs are JSON (lists stay lists:
what the runner sends as typed arrays arrives here as lists; ``np.asarray`` them in the worker, or
pass ``--input`` values the worker accepts either way).

Exit status: 0 when every rank succeeded; else that of the first rank that failed (1 for an
exception, whose traceback it prints).
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, List, Optional, Sequence

from . import CancelSignal, DistributedWorker

FAILED_DIR_ENV = "REACTOR_WORKER_RUN_FAILED_DIR"
# How long a failed peer holds its connections for rank 0 to stop it (rank 0 kills it long before).
PEER_HOLD_S = 30.0
USAGE = "python -m reactor_worker run module:Class --input in.json [--load-args args.json] [--world-size N] [--path DIR]"


def _json_arg(value: Optional[str], what: str) -> Any:
    """A JSON file's contents, or inline JSON (``'{"width": 64}'``); None when not given."""
    if value is None:
        return None
    text = value
    if not value.lstrip().startswith(("{", "[")):
        try:
            with open(value, encoding="utf8") as f:
                text = f.read()
        except OSError as e:
            raise SystemExit(f"reactor_worker: cannot read {what} {value!r}: {e.strerror}. Pass a JSON file or inline JSON.") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise SystemExit(f"reactor_worker: {what} {value!r} is not JSON: {e}.") from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _load_class(target: str) -> type:
    module, _, name = target.partition(":")
    if not module or not name:
        raise SystemExit(f"reactor_worker: the worker must look like module:Class (video_worker:VideoWorker), got {target!r}.")
    # Errors here are the worker's own (a typo, a syntax error, a missing import): their traceback says where.
    mod = importlib.import_module(module)
    cls = getattr(mod, name, None)
    if not (isinstance(cls, type) and issubclass(cls, DistributedWorker)):
        defined = sorted(k for k, v in vars(mod).items() if isinstance(v, type) and issubclass(v, DistributedWorker) and v is not DistributedWorker)
        raise SystemExit(
            f"reactor_worker: {module} ({getattr(mod, '__file__', '?')}) has no DistributedWorker named {name}"
            + (f"; it defines {', '.join(defined)}." if defined else ".")
        )
    return cls


def describe(value: Any, path: str = "result") -> List[str]:
    """One line per field of a result: arrays and tensors with dtype and shape, other values with their type."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        kind = "tensor" if type(value).__module__.startswith("torch") else "ndarray"
        device = f" on {value.device}" if kind == "tensor" else ""
        return [f"{path}: {kind} {str(dtype).replace('torch.', '')} {tuple(shape)}{device}"]
    if isinstance(value, dict):
        return [line for k, v in value.items() for line in describe(v, f"{path}.{k}")] or [f"{path}: dict (empty)"]
    if isinstance(value, (list, tuple)):
        head = [f"{path}: {type(value).__name__} of {len(value)}"]
        return head + [line for i, v in enumerate(value[:8]) for line in describe(v, f"{path}[{i}]")]
    text = repr(value)
    return [f"{path}: {type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"]


def run_rank(target: str, rank: int, world_size: int, input_value: Any, load_args: Any) -> Any:
    """Loads the worker as the runner would on ``rank`` and runs one ``generate(input)``; returns its result."""
    from ._rank import _convert, _hints

    cls = _load_class(target)
    worker = cls()
    worker.rank = rank
    worker.world_size = world_size
    worker.device = os.environ.get("REACTOR_WORKER_DEVICE", "cpu")
    worker.gpu_index = None
    worker.signal = CancelSignal()
    worker._progress_reporter = lambda ratio, stage: print(f"[rank {rank}] load: {ratio:.0%} {stage}", file=sys.stderr)
    kwargs = load_args or {}
    if not isinstance(kwargs, dict):
        raise SystemExit(f"reactor_worker: --load-args must be a JSON object (load(**kwargs) takes keyword arguments), got {type(kwargs).__name__}.")
    load_hints = _hints(worker.load)
    worker.load(**{k: _convert(v, load_hints.get(k), f"loadArgs.{k}") for k, v in kwargs.items()})
    worker._progress_reporter = None
    params = list(inspect.signature(worker.generate).parameters.values())
    hint = _hints(worker.generate).get(params[0].name) if params else None
    return worker.generate(_convert(input_value, hint, "input"))


def _leave_process_group() -> None:
    """Every rank leaves the worker's process group together (a barrier, then its teardown) before
    it exits: a gloo group left to the interpreter's exit can abort the process ("terminate called
    without an active exception") while a peer still talks to it."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    dist.barrier()
    dist.destroy_process_group()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m reactor_worker", usage=USAGE, description="Runs a reactor_worker.DistributedWorker without Node, for debugging.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", usage=USAGE, help="load() then one generate(input), and print the result's shapes")
    run.add_argument("target", help="the worker, module:Class (as the runner's pythonWorker() names it)")
    run.add_argument("--input", required=True, help="generate()'s input: a JSON file, or inline JSON")
    run.add_argument("--load-args", help="load()'s keyword arguments: a JSON file, or inline JSON (default {})")
    run.add_argument("--world-size", type=int, default=1, help="ranks to run (default 1); rank 0 is this process")
    run.add_argument("--path", action="append", default=[], help="a folder to import the worker from (repeatable; default: the current folder)")
    run.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.world_size < 1:
        parser.error(f"--world-size must be a positive integer, got {args.world_size}")
    for p in reversed(args.path or ["."]):
        sys.path.insert(0, os.path.abspath(p))
    input_value = _json_arg(args.input, "--input")
    load_args = _json_arg(args.load_args, "--load-args")

    peers: List[subprocess.Popen] = []
    # Where a peer that failed says so: it then keeps its connections open until rank 0 stops it,
    # so rank 0, which may be waiting for it inside a collective, ends the run with its status
    # instead of a gloo "connection closed" of its own (or an abort).
    failed_dir = os.environ.get(FAILED_DIR_ENV)
    if args.rank == 0:
        failed_dir = tempfile.mkdtemp(prefix="reactor-worker-run-")
        os.environ[FAILED_DIR_ENV] = failed_dir
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(args.world_size), "LOCAL_WORLD_SIZE": str(args.world_size)})
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT") or str(_free_port())
        for r in range(1, args.world_size):
            env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r)}
            peers.append(subprocess.Popen([sys.executable, "-m", "reactor_worker", *argv, "--rank", str(r)], env=env))
    if peers:
        # A peer that fails leaves this rank waiting in a collective for it: end the run with its status.
        def watch() -> None:
            while True:
                for r, p in enumerate(peers, start=1):
                    code = p.poll()
                    if os.path.exists(os.path.join(failed_dir, f"rank{r}")):
                        code = 1
                    if code not in (None, 0):
                        print(f"rank {r} failed (exit status {code}); stopping every rank", file=sys.stderr)
                        sys.stderr.flush()
                        for q in peers:
                            if q.poll() is None:
                                q.kill()
                        # os._exit skips the finally below: remove the folder here.
                        shutil.rmtree(failed_dir, ignore_errors=True)
                        os._exit(code)
                if all(p.poll() == 0 for p in peers):
                    return
                time.sleep(0.05)

        threading.Thread(target=watch, name="reactor-peers", daemon=True).start()
    try:
        try:
            result = run_rank(args.target, args.rank, args.world_size, input_value, load_args)
        except SystemExit:
            raise
        except BaseException:  # noqa: BLE001 - the worker's error, with its traceback, is the point
            print(f"rank {args.rank} failed:", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
            if args.rank != 0 and failed_dir:
                with open(os.path.join(failed_dir, f"rank{args.rank}"), "w") as f:
                    f.write("1")
                threading.Event().wait(PEER_HOLD_S)
            return 1
        _leave_process_group()
        if args.rank == 0:
            print(f"rank 0 of {args.world_size}: generate() returned")
            for line in describe(result):
                print(f"  {line}")
        codes = [p.wait() for p in peers]
        failed = next((c for c in codes if c != 0), 0)
        if failed:
            print(f"a peer rank exited with status {failed}", file=sys.stderr)
        return failed
    finally:
        for p in peers:
            if p.poll() is None:
                p.kill()
        if args.rank == 0 and failed_dir:
            shutil.rmtree(failed_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
