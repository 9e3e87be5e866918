"""Compiled fixed-shape parts of a Python worker's model: ``torch.compile``, CUDA graphs of a fixed
batch, or both, with the warm-up reported as load progress and a fall back to eager, said with a
warning that names why (docs/runner.md, "Compiled models").

    from reactor_worker.compile import FixedShape

    self.fast = FixedShape(self.run_model, mode=cfg_compile, device=torch_device,
                           progress=lambda r, s: self.report_progress(0.5 + 0.4 * r, s))
    self.fast.prepare(example_input)        # in load(): compiles, captures, warms up
    out = self.fast(x)                      # in generate(): x on the device, same shape

Modes (the worker's config key, ``compile:``):

- ``off``: eager.
- ``compile``: ``torch.compile(fn, dynamic=False)`` (Inductor), one compilation per shape.
- ``graphs``: the eager function captured as a CUDA graph per input shape and replayed (CUDA only):
  no kernel launch cost, same kernels.
- ``both``: ``torch.compile`` and its kernels captured as a CUDA graph.
- ``auto`` (the default): ``both`` on a CUDA device, ``off`` on CPU.

What cannot be had falls back one step, each time with a ``warning:`` line on stdout naming why
(a torch without ``torch.compile``, CUDA graphs on CPU, a compile or capture that raised):
``both`` -> ``compile`` or ``graphs`` -> ``off``. ``FixedShape.running`` says what runs, and
``FixedShape.fallback`` why it is not what was asked for (``None`` when it is).

A function given here must take device tensors (and hashable static arguments: Python ints,
tuples) and return one tensor; its shapes may not depend on the values. The output of a graph
replay is cloned, so it stays valid after the next call (a pipelined caller reads step N while
step N+1 runs).

Importing this module needs torch.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

__all__ = ["MODES", "FixedShape", "resolve_mode"]

MODES = ("auto", "off", "compile", "graphs", "both")

Progress = Callable[[float, str], None]


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def resolve_mode(mode: str, device: torch.device) -> tuple[str, Optional[str]]:
    """What ``mode`` comes to on ``device`` before anything is tried: ``(mode, why not what was asked)``.
    ``auto`` is ``both`` on CUDA and ``off`` elsewhere (not a fall back: no warning)."""
    if mode not in MODES:
        raise ValueError(f"compile must be one of {', '.join(MODES)}, got {mode!r}")
    cuda = device.type == "cuda"
    if mode == "auto":
        mode = "both" if cuda else "off"
    why: Optional[str] = None
    if mode in ("compile", "both") and not hasattr(torch, "compile"):
        why = f"torch {torch.__version__} has no torch.compile (it came with torch 2.0)"
        mode = "graphs" if mode == "both" and cuda else "off"
    if mode in ("graphs", "both") and not cuda:
        why = f"CUDA graphs need a CUDA device and this rank runs on {device.type}"
        mode = "compile" if mode == "both" and hasattr(torch, "compile") else "off"
    return mode, why


class _Graph:
    """One captured CUDA graph: a static input buffer, the replayed function, its static output."""

    def __init__(self, fn: Callable[..., torch.Tensor], x: torch.Tensor, static: tuple[Any, ...], warmups: int) -> None:
        self.input = x.clone()
        # Warm-up calls on a side stream (what torch.cuda.graphs asks for): kernels chosen,
        # a compiled function's code generated, allocator pools primed.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmups):
                fn(self.input, *static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = fn(self.input, *static)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.input.copy_(x, non_blocking=True)
        self.graph.replay()
        return self.output.clone()


class FixedShape:
    """``fn`` run eager, compiled, replayed as CUDA graphs, or both (see the module doc).

    ``log`` receives the warning lines (default: ``print(..., flush=True)``: a rank's stdout goes
    to the server's log). ``max_shapes`` bounds the graphs (and compilations) kept: the least
    recent shape is dropped beyond it.
    """

    def __init__(
        self,
        fn: Callable[..., torch.Tensor],
        mode: str = "auto",
        device: torch.device | str = "cpu",
        progress: Optional[Progress] = None,
        log: Optional[Callable[[str], None]] = None,
        warmups: int = 3,
        max_shapes: int = 4,
        name: str = "model",
    ) -> None:
        self.device = torch.device(device)
        self.asked = mode
        self.name = name
        self.eager = fn
        self.warmups = warmups
        self.max_shapes = max_shapes
        self._progress = progress
        self._log = log or (lambda line: print(line, flush=True))
        self.mode, self.fallback = resolve_mode(mode, self.device)
        if self.fallback is not None:
            self._warn(self.fallback)
        self._compiled: Optional[Callable[..., torch.Tensor]] = None
        if self.mode in ("compile", "both"):
            try:
                self._compiled = torch.compile(fn, dynamic=False)  # type: ignore[attr-defined]
            except Exception as e:  # noqa: BLE001 - any compiler failure falls back, said
                self._fall_back(f"torch.compile raised {_first_line(e)}", "graphs" if self.mode == "both" else "off")
        self._graphs: dict[Any, _Graph] = {}
        self._warm: set[Any] = set()
        self.warmup_ms = 0.0

    @property
    def running(self) -> str:
        """What runs now, in words: ``eager``, ``torch.compile``, ``CUDA graphs``, ``torch.compile + CUDA graphs``."""
        return {"off": "eager", "compile": "torch.compile", "graphs": "CUDA graphs", "both": "torch.compile + CUDA graphs"}[self.mode]

    def describe(self) -> str:
        """``running`` with what was asked and why not, for a load line."""
        if self.fallback is None:
            return f"{self.running} (compile: {self.asked})"
        return f"{self.running} (compile: {self.asked}; {self.fallback})"

    def _warn(self, why: str) -> None:
        self._log(f"warning: {self.name}: compile {self.asked} -> {self.running_for(self.mode)}: {why}")

    @staticmethod
    def running_for(mode: str) -> str:
        return {"off": "eager", "compile": "torch.compile", "graphs": "CUDA graphs", "both": "torch.compile + CUDA graphs"}[mode]

    def _fall_back(self, why: str, to: str) -> None:
        if to == "graphs" and self.device.type != "cuda":
            to = "off"
        self.mode = to
        self.fallback = why
        self._graphs.clear()
        if to in ("off", "graphs"):
            self._compiled = None
        self._warn(why)

    def _report(self, ratio: float, stage: str) -> None:
        if self._progress is not None:
            self._progress(max(0.0, min(1.0, ratio)), stage)

    def prepare(self, x: torch.Tensor, *static: Any) -> str:
        """Compiles / captures for ``x``'s shape and warms up (load time), reporting progress from 0
        to 1; returns :attr:`running`. A failure here falls back (said) and warms the fall back."""
        t0 = time.perf_counter()
        self._report(0.0, f"{self.name}: warming up ({self.running})")
        self(x, *static)
        self._report(1.0, f"{self.name}: ready ({self.running})")
        self.warmup_ms = (time.perf_counter() - t0) * 1000
        return self.running

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __call__(self, x: torch.Tensor, *static: Any) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype, static)
        if self.mode in ("graphs", "both"):
            g = self._graphs.get(key)
            if g is None:
                g = self._capture(key, x, static)
            if g is not None:
                return g(x)
        if self.mode == "compile" and self._compiled is not None:
            if key not in self._warm:
                try:
                    self._report(0.1, f"{self.name}: torch.compile for {list(x.shape)} (first call traces and builds kernels)")
                    y = self._compiled(x, *static)
                    self._sync()
                    self._warm.add(key)
                    return y
                except Exception as e:  # noqa: BLE001 - a compile fails while tracing, not when asked
                    self._fall_back(f"torch.compile failed while tracing ({_first_line(e)})", "off")
                    return self.eager(x, *static)
            return self._compiled(x, *static)
        return self.eager(x, *static)

    def _capture(self, key: Any, x: torch.Tensor, static: tuple[Any, ...]) -> Optional[_Graph]:
        fn = self._compiled if self.mode == "both" and self._compiled is not None else self.eager
        what = "torch.compile + CUDA graph" if fn is self._compiled else "CUDA graph"
        self._report(0.1, f"{self.name}: {what} for {list(x.shape)} (warm-up, then capture)")
        try:
            g = _Graph(fn, x, static, self.warmups)
            self._sync()
        except Exception as e:  # noqa: BLE001 - a capture or compile that raised falls back, said
            torch.cuda.synchronize(self.device)
            if self.mode == "both":
                # Which part failed: a compile error keeps graphs of the eager function, a capture
                # error keeps the compiled function without graphs.
                compiled_ok = self._try_compiled(x, static)
                self._fall_back(f"{what} failed ({_first_line(e)})", "compile" if compiled_ok else "graphs")
                return self._capture(key, x, static) if self.mode == "graphs" else None
            self._fall_back(f"{what} failed ({_first_line(e)})", "off")
            return None
        if len(self._graphs) >= self.max_shapes:
            del self._graphs[next(iter(self._graphs))]
        self._graphs[key] = g
        self._report(0.9, f"{self.name}: {what} captured")
        return g

    def _try_compiled(self, x: torch.Tensor, static: tuple[Any, ...]) -> bool:
        if self._compiled is None:
            return False
        try:
            self._compiled(x, *static)
            self._sync()
            self._warm.add((tuple(x.shape), x.dtype, static))
            return True
        except Exception:  # noqa: BLE001 - only whether it runs matters here
            return False
