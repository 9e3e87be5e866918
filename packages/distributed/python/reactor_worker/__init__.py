"""Python ranks of ``@reactor/distributed``'s ``DistributedRunner``.

A worker subclasses :class:`DistributedWorker` and implements ``load(**kwargs)``,
``generate(input)`` and ``reset()``. The runner (TypeScript) starts one Python process per rank
(``python3 -m reactor_worker._rank``), sets ``rank``, ``world_size`` and ``device`` before
``load()``, sends the same input to every rank and returns rank 0's result. See
``docs/runner.md`` ("Python workers").

Importing this package needs only the standard library; the rank process needs NumPy, and
:func:`init_distributed` needs torch.
"""
from __future__ import annotations

import math
import os
import sys
import threading
from typing import Any, Optional

__all__ = [
    "CancelledError",
    "DistributedWorker",
    "InjectedFaultError",
    "PythonWorkerError",
    "SharedMemoryCapacityError",
    "UnsendableValueError",
    "init_distributed",
]


class PythonWorkerError(Exception):
    """A problem with the Python side itself (interpreter, packages, the worker class).

    ``code`` is one of the ``python_*`` codes of ``docs/errors.md``; it reaches TypeScript as a
    ``PythonWorkerError`` with the same ``code``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class UnsendableValueError(TypeError):
    """A value that cannot travel between a Python rank and the TypeScript parent (code ``python_value``)."""

    code = "python_value"


class InjectedFaultError(Exception):
    """Raised from ``generate()`` by an injected ``throw`` fault (``REACTOR_FAULTS``); code ``injected_fault``."""

    code = "injected_fault"


class SharedMemoryCapacityError(Exception):
    """A shared-memory block does not fit (code ``shm_capacity``); same fields as the TypeScript class."""

    code = "shm_capacity"

    def __init__(self, what: str, needed_bytes: int, available_bytes: int, limit_name: str) -> None:
        super().__init__(
            f"Shared memory for {what} needs {_format_bytes(needed_bytes)} but only {_format_bytes(available_bytes)} "
            f"{limit_name}. Raise the limit: give the container more shared memory (docker run --shm-size=2g; "
            f"containers default to 64 MB), free space in /dev/shm, or raise options.maxShmBytes."
        )
        self.what = what
        self.neededBytes = needed_bytes
        self.availableBytes = available_bytes
        self.limitName = limit_name


class CancelledError(Exception):
    """Raised by :meth:`DistributedWorker.check_cancelled` once the caller cancelled the call in flight."""

    name = "AbortError"


def _check_progress(ratio: Any, stage: Any, where: str) -> str:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio < 0 or ratio > 1:
        raise ValueError(f"{where}: ratio must be a number from 0 to 1 (0.63 for 63 %), got {ratio!r}")
    if not isinstance(stage, str) or not stage.strip():
        raise TypeError(f"{where}: stage must be a non-empty string saying what the rank is doing ('reading weights', 'compiling'), got {stage!r}")
    return stage.strip()[:100]


def _format_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    v = float(n)
    units = ["KiB", "MiB", "GiB", "TiB"]
    u = -1
    while True:
        v /= 1024
        u += 1
        if v < 1024 or u == len(units) - 1:
            break
    return f"{v:.0f} {units[u]}" if v >= 100 else f"{v:.1f} {units[u]}"


class CancelSignal:
    """The cancel switch of the call in flight (``worker.signal``): ``aborted`` turns true when the caller cancels."""

    def __init__(self) -> None:
        self._event = threading.Event()

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the call is cancelled (True) or ``timeout`` seconds pass (False)."""
        return self._event.wait(timeout)

    def _abort(self) -> None:
        self._event.set()


class DistributedWorker:
    """Base class of a Python rank's worker.

    The runner constructs the class with no arguments, then sets :attr:`rank`,
    :attr:`world_size` and :attr:`device` (``"cuda:0"`` on a GPU rank, whose one GPU is
    ``CUDA_VISIBLE_DEVICES``; ``"cpu"`` otherwise) before calling ``load(**load_args)`` once.
    Every ``generate(input)`` gets the same input on every rank; rank 0's return value goes back.

    Inputs arrive as dicts/lists/str/numbers with NumPy arrays (1-D views of shared memory, valid
    during the call: copy what you keep). When ``generate``'s parameter is annotated with a
    dataclass (``def generate(self, input: VideoInput)``), a dict input is turned into that class;
    ``load`` parameters annotated ``pathlib.Path`` or with a dataclass are converted the same way.
    """

    rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    #: The physical GPU index of this rank (as ``nvidia-smi`` counts), or None on a CPU rank.
    gpu_index: Optional[int] = None
    #: The cancel switch of the call in flight (a new one per call).
    signal: CancelSignal = CancelSignal()
    #: The rank whose result the runner returns (the runner's ``outputRank``: a pipeline's last stage).
    output_rank: int = 0

    # Set by the rank process on rank 0: allocates result arrays in rank 0's shared-memory block.
    _result_allocator: Any = None
    # Set by the rank process during load(): sends a checked load-progress report to the parent.
    _progress_reporter: Any = None

    def report_progress(self, ratio: float, stage: str) -> None:
        """Reports this rank's load progress from ``load()`` (weights read, compiled, warmed).

        ``ratio`` is how far this rank's load is (0..1), ``stage`` what it does now (``"reading
        weights"``, up to 100 characters). The runner averages its ranks and the app host shows it
        (session status ``progress``, ``reactor_load_progress_ratio``, ``reactor run``'s progress
        bar, ``/health/ready``). Reports faster than every 50 ms are dropped (a new stage always
        goes); outside ``load()`` it does nothing. Raises ``ValueError`` for a ratio outside 0..1
        and ``TypeError`` for an empty or non-string stage.
        """
        text = _check_progress(ratio, stage, f"{type(self).__name__}.report_progress()")
        if self._progress_reporter is not None:
            self._progress_reporter(float(ratio), text)

    def gpu_busy(self) -> Optional[float]:
        """This rank's GPU busy ratio now (0..1), or None when not known.

        Called by the rank at most once a second once loaded, from its progress thread (not the
        thread that runs ``generate``); the runner exports it as ``reactor_rank_gpu_busy_ratio``.
        The default reads ``torch.cuda.utilization()`` (NVML, through pynvml) on a CUDA rank
        whose worker has imported torch, and says None on a CPU rank, without torch, or when that
        fails. Override it to report from elsewhere; an exception stops the sampling.
        """
        if not str(self.device).startswith("cuda"):
            return None
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        try:
            if not torch.cuda.is_available():
                return None
            return float(torch.cuda.utilization()) / 100.0
        except Exception:  # noqa: BLE001 - no pynvml, no NVML, a driver that refuses: unknown
            return None

    @property
    def is_leader(self) -> bool:
        """True on rank 0."""
        return self.rank == 0

    @property
    def is_output(self) -> bool:
        """True on the rank whose result the runner returns (``output_rank``; rank 0 unless the runner's ``outputRank`` says otherwise)."""
        return self.rank == self.output_rank

    def load(self, **kwargs: Any) -> None:
        """Loads weights and state; called once, with the runner's ``loadArgs`` as keyword arguments."""

    def generate(self, input: Any) -> Any:  # noqa: A002 - the seed's name
        raise NotImplementedError(f"{type(self).__name__} does not implement generate(input).")

    def reset(self) -> None:
        """Clears per-session state (weights stay loaded)."""

    def check_cancelled(self) -> None:
        """Raises :class:`CancelledError` when the caller cancelled the call in flight."""
        if self.signal.aborted:
            raise CancelledError("the call was cancelled")

    def result_array(self, shape: Any, dtype: Any = "uint8") -> Any:
        """A C-contiguous NumPy array to return in the result without any copy.

        On the output rank it lies in the result's shared-memory block (the runner reads it in place); on
        other ranks, and when the block cannot grow, it is an ordinary array. Valid until the
        next ``generate()`` starts.
        """
        import numpy as np

        dt = np.dtype(dtype)
        count = 1
        for d in (shape if isinstance(shape, (tuple, list)) else (shape,)):
            count *= int(d)
        if self._result_allocator is not None:
            mem = self._result_allocator(count * dt.itemsize)
            if mem is not None:
                return mem.view(dt).reshape(shape)
        return np.empty(shape, dtype=dt)


_COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "send",
)

# The rank process installs a function here: phase("collective") / phase(None) around collectives.
_collective_hook: Any = None


def init_distributed(backend: Optional[str] = None, timeout_s: Optional[float] = None, blocking_wait: bool = False) -> str:
    """Initializes ``torch.distributed`` for this rank and returns the backend used.

    Uses the environment the runner set (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``): NCCL when this rank has a CUDA device and NCCL is available, gloo otherwise
    (CPU ranks). Idempotent. Collectives called through ``torch.distributed`` afterwards are
    published as the ``collective`` phase of the rank's progress block, so a stall inside one is
    named as such.

    NCCL collectives return before the GPU has done them, so a hung one shows where the rank
    next waits for the GPU; ``blocking_wait=True`` (``TORCH_NCCL_BLOCKING_WAIT=1``) makes every
    collective wait in the call itself, where the stall detector names it (at some cost in
    overlap; see docs/runner.md).
    """
    import datetime

    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise PythonWorkerError("python_environment", "This torch build has no torch.distributed: install a torch with distributed support.")
    if dist.is_initialized():
        return str(dist.get_backend())
    if backend is None:
        cuda = torch.cuda.is_available() and os.environ.get("REACTOR_DEVICE", "cpu") != "cpu"
        backend = "nccl" if cuda and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(0)
        if blocking_wait:
            os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"
            os.environ["NCCL_BLOCKING_WAIT"] = "1"
    kwargs: dict = {}
    if timeout_s is not None:
        kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        **kwargs,
    )
    _label_collectives(dist)
    return backend


def _label_collectives(dist: Any) -> None:
    for name in _COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is None or getattr(fn, "_reactor_labelled", False):
            continue

        def labelled(*args: Any, __fn: Any = fn, __name: str = name, **kwargs: Any) -> Any:
            hook = _collective_hook
            if hook is None:
                return __fn(*args, **kwargs)
            if __name in ("send", "recv"):
                # A pipeline's point-to-point call: the stall detector names the peer this rank waits on.
                peer = kwargs.get("dst" if __name == "send" else "src", args[1] if len(args) > 1 else None)
                hook(True, (__name, int(peer)) if isinstance(peer, int) else None)
            else:
                hook(True)
            try:
                return __fn(*args, **kwargs)
            finally:
                hook(False)

        labelled._reactor_labelled = True  # type: ignore[attr-defined]
        labelled.__name__ = name
        labelled.__doc__ = fn.__doc__
        setattr(dist, name, labelled)
