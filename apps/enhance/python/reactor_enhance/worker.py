"""``EnhanceTorchWorker``: one Python rank of the enhance app's ``DistributedRunner`` when the app
runs its PyTorch backend (``backend: torch``). The same contract as the TypeScript
``EnhanceWorker`` (``apps/enhance/src/enhance-worker.ts``): every rank gets the same step, upscales
its share (a band of rows of every frame, or some whole frames), and rank 0 gathers the shares
(``torch.distributed``: NCCL between GPUs, gloo on CPU) and returns the step's frames.

On CUDA a step can be pipelined (``pipeline: true``): the call queues its frames on the GPU and
returns the previous call's frames, copied back while the GPU works on the new ones.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from reactor_worker import DistributedWorker, init_distributed

from .esrgan import TorchUpscaler
from .weights import EnhanceError, WeightsCorruptError, WeightsMissingError, read_model_files

__all__ = ["EnhanceTorchWorker", "InputInvalidError", "WeightsCorruptError", "WeightsMissingError"]


class InputInvalidError(EnhanceError):
    """A step's frames do not match the size and count they declare (code ``enhance_input_invalid``)."""

    code = "enhance_input_invalid"


def row_tile(height: int, world_size: int, rank: int, radius: int) -> tuple[int, int, int, int]:
    """``rowTile`` of ``src/partition.ts``: ``(y0, y1, in0, in1)``."""
    y0 = (height * rank) // world_size
    y1 = (height * (rank + 1)) // world_size
    return y0, y1, max(0, y0 - radius), min(height, y1 + radius)


def frame_share(n: int, world_size: int, rank: int) -> tuple[int, int]:
    """``frameShare`` of ``src/partition.ts``: frames ``[f0, f1)``."""
    return (n * rank) // world_size, (n * (rank + 1)) // world_size


@dataclass
class _Step:
    """One step as queued: its geometry and, for a pipelined step, the output still on the device."""

    input: dict[str, Any]
    up: TorchUpscaler
    mine: torch.Tensor | None
    done: Any  # a CUDA event, or None
    t0: float
    start: Any = None  # a CUDA event before the step's work


class EnhanceTorchWorker(DistributedWorker):
    """One rank of the enhance model on PyTorch (CUDA float16 + channels_last, or CPU float32)."""

    def load(
        self,
        model: str,
        scale: int,
        package_dirs: dict[str, str],
        published_sha256: dict[str, str] | None = None,
        warmup: dict[str, Any] | None = None,
        threads: int | None = None,
        compile: str = "auto",  # noqa: A002 - the config's name
        **_ignored: Any,
    ) -> None:
        self.package_dirs = package_dirs
        self.compile_mode = compile
        self.published = published_sha256
        self.models: dict[str, TorchUpscaler] = {}
        self.pending: _Step | None = None
        self.reports: list[dict[str, Any]] | None = None
        dev = str(self.device)
        self.torch_device = torch.device("cuda", 0) if dev.startswith("gpu") or dev.startswith("cuda") else torch.device("cpu")
        if self.torch_device.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError(f"rank {self.rank} was given GPU {dev} but torch sees no CUDA device (torch {torch.__version__})")
            torch.cuda.set_device(self.torch_device)
            torch.backends.cudnn.benchmark = True
            self.copy_stream = torch.cuda.Stream()
        elif threads:
            torch.set_num_threads(threads)
        if self.world_size > 1:
            init_distributed()
        self.report_progress(0.1, f"reading ESRGAN {model} x{scale}")
        up = self._upscaler(model, scale)
        if warmup:
            # A step as the ranks will get it: this rank's frames and rows, so a compiled model
            # (or a CUDA graph of the batch) is built now, not at the first frame a viewer waits for.
            n, w, h = int(warmup["n"]), int(warmup["width"]), int(warmup["height"])
            step = {"n": n, "width": w, "height": h, "split": warmup.get("split", "tiles")}
            f0, f1, band = self._plan(step, up)
            if f1 > f0:
                self.report_progress(0.3, f"warming up ESRGAN {model} ({up.fast.running if up.fast else 'eager'})")
                up.upscale(torch.zeros((n, h, w, 3), dtype=torch.uint8)[f0:f1], band)
            if self.torch_device.type == "cuda":
                torch.cuda.synchronize()
        self.report_progress(1.0, "ready")

    def _upscaler(self, model: str, scale: int) -> TorchUpscaler:
        key = f"{model}x{scale}"
        have = self.models.get(key)
        if have is not None:
            return have
        package = self.package_dirs.get(model)
        if package is None:
            raise WeightsMissingError(f"ESRGAN {model}: the app passed no package folder for it (known: {', '.join(self.package_dirs)})")
        t0 = time.perf_counter()
        files = read_model_files(model, scale, package, self.published)
        up = TorchUpscaler(files, self.torch_device)
        # Compiled / captured at its first step of each shape (the load's warm-up for the first model).
        fast = up.compile(self.compile_mode, progress=lambda r, st: self.report_progress(0.3 + 0.65 * r, st),
                          log=(lambda line: print(line, flush=True)) if self.is_leader else (lambda line: None))
        if len(self.models) >= 2:  # keep at most two models, as the tfjs worker does
            oldest = next(iter(self.models))
            del self.models[oldest]
        self.models[key] = up
        if self.is_leader:
            mib = sum(f.bytes for f in files.files) / 2**20
            print(
                f"weights ESRGAN {model} x{scale} ({files.weight_dtype}, {mib:.1f} MiB, read in {(time.perf_counter() - t0) * 1000:.0f} ms) "
                f"from {files.dir}: sha256 {files.sha256}; torch {torch.__version__} on {self._adapter()} ({up.dtype}); {fast.describe()}",
                flush=True,
            )
        return up

    def _adapter(self) -> str:
        if self.torch_device.type == "cuda":
            return torch.cuda.get_device_name(self.torch_device)
        return f"CPU ({torch.get_num_threads()} threads)"

    def _report(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "backend": f"torch-{self.torch_device.type}",
            "adapter": self._adapter(),
            "pci": os.environ.get("REACTOR_GPU_PCI") if self.torch_device.type == "cuda" else None,
            "compile": next((up.fast.describe() for up in reversed(self.models.values()) if up.fast is not None), "eager"),
        }

    def _gather_reports(self) -> list[dict[str, Any]]:
        if self.reports is None:
            mine = self._report()
            if self.world_size == 1:
                self.reports = [mine]
            else:
                every: list[Any] = [None] * self.world_size
                dist.all_gather_object(every, mine)
                self.reports = every
        return self.reports

    def _plan(self, inp: dict[str, Any], up: TorchUpscaler) -> tuple[int, int, tuple[int, int, int, int]]:
        n, h = int(inp["n"]), int(inp["height"])
        f0, f1, band = 0, n, (0, h, 0, h)
        if self.world_size > 1 and inp["split"] == "tiles":
            band = row_tile(h, self.world_size, self.rank, up.files.radius)
        elif self.world_size > 1:
            f0, f1 = frame_share(n, self.world_size, self.rank)
        return f0, f1, band

    def _queue(self, inp: dict[str, Any]) -> _Step:
        n, w, h = int(inp["n"]), int(inp["width"]), int(inp["height"])
        frames = inp["frames"]
        if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8 or frames.size != n * w * h * 3:
            got = getattr(frames, "size", None)
            raise InputInvalidError(f"Rank {self.rank}: a step of {n} frames of {w}x{h} needs {n * w * h * 3} bytes, got {got}")
        up = self._upscaler(str(inp["model"]), int(inp["scale"]))
        f0, f1, band = self._plan(inp, up)
        t0 = time.perf_counter()
        start = done = None
        if self.torch_device.type == "cuda":
            start, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        src = torch.from_numpy(frames.reshape(n, h, w, 3))
        mine = up.upscale(src[f0:f1], band) if f1 > f0 else None
        if done is not None:
            done.record()
        # The input array lives in the runner's shared memory, valid for this call only: a
        # side-by-side picture of a pipelined step needs its own copy.
        kept = dict(inp, frames=frames.copy()) if inp.get("sideBySide") and inp.get("pipeline") else inp
        return _Step(kept, up, mine, done, t0, start)

    def generate(self, inp: dict[str, Any]) -> dict[str, Any]:
        reports = self._gather_reports()
        step = self._queue(inp)
        if not inp.get("pipeline") or self.torch_device.type != "cuda":
            self.pending = None
            return self._complete(step, reports)
        prev, self.pending = self.pending, step
        if prev is None:
            return {"frames": np.zeros(0, np.uint8), "n": 0, "width": 0, "height": 0, "model": inp["model"], "scale": step.up.scale,
                    "weightsSha256": step.up.files.sha256, "ranks": [], "timings": {"computeMs": 0.0, "gatherMs": 0.0}}
        return self._complete(prev, reports)

    def _complete(self, step: _Step, reports: list[dict[str, Any]]) -> dict[str, Any]:
        if self.torch_device.type != "cuda":
            return self._assemble(step, reports)
        # On the copy stream, after the step's own work: a pipelined call's next step, queued on
        # the default stream meanwhile, runs beside this gather and copy back.
        with torch.cuda.stream(self.copy_stream):
            if step.done is not None:
                self.copy_stream.wait_event(step.done)
            out = self._assemble(step, reports)
            self.copy_stream.synchronize()
        if step.start is not None and step.done is not None:
            # GPU time of the step's upscaling (upload, network, bytes), from CUDA events.
            out["timings"]["gpuMs"] = step.start.elapsed_time(step.done)
        return out

    def _assemble(self, step: _Step, reports: list[dict[str, Any]]) -> dict[str, Any]:
        inp, up = step.input, step.up
        n, w, h, s = int(inp["n"]), int(inp["width"]), int(inp["height"]), up.scale
        f0, f1, band = self._plan(inp, up)
        o_h, o_w = h * s, w * s
        mine = step.mine
        if mine is None:
            mine = torch.zeros((0, (band[1] - band[0]) * s, o_w, 3), dtype=torch.uint8, device=self.torch_device)
        t1 = time.perf_counter()
        base = {"model": inp["model"], "scale": s, "weightsSha256": up.files.sha256}
        parts = self._gather(mine, inp, up) if self.world_size > 1 else [mine]
        t2 = time.perf_counter()
        if not self.is_leader:
            return {**base, "frames": np.zeros(0, np.uint8), "n": 0, "width": 0, "height": 0, "ranks": [],
                    "timings": {"computeMs": (t1 - step.t0) * 1000, "gatherMs": (t2 - t1) * 1000}}
        if len(parts) == 1:
            whole = parts[0]
        elif inp["split"] == "tiles":
            whole = torch.cat(parts, dim=1)  # bands of rows, in rank order
        else:
            whole = torch.cat(parts, dim=0)  # whole frames, in rank order
        if inp.get("sideBySide"):
            src = torch.from_numpy(np.asarray(inp["frames"]).reshape(n, h, w, 3)).to(whole.device)
            near = src[:, :, None, :, None, :].expand(n, h, s, w, s, 3).reshape(n, o_h, o_w, 3)
            whole = torch.cat([near, whole], dim=2)
        out_w = whole.shape[2]
        result = self._result_array(n * o_h * out_w * 3)
        torch.from_numpy(result).view(n, o_h, out_w, 3).copy_(whole)
        t3 = time.perf_counter()
        return {**base, "frames": result, "n": n, "width": out_w, "height": o_h, "ranks": reports,
                "timings": {"computeMs": (t1 - step.t0) * 1000, "gatherMs": (t2 - t1) * 1000, "copyMs": (t3 - t2) * 1000}}

    def _gather(self, mine: torch.Tensor, inp: dict[str, Any], up: TorchUpscaler) -> list[torch.Tensor]:
        """Every rank's share onto rank 0 (the other ranks get an empty list). Shares may differ by a
        row or a frame, so each is padded to the largest along its first split axis."""
        n, h, s = int(inp["n"]), int(inp["height"]), up.scale
        tiles = inp["split"] == "tiles"
        sizes = []
        for r in range(self.world_size):
            if tiles:
                y0, y1, _, _ = row_tile(h, self.world_size, r, up.files.radius)
                sizes.append((y1 - y0) * s)
            else:
                f0, f1 = frame_share(n, self.world_size, r)
                sizes.append(f1 - f0)
        axis = 1 if tiles else 0
        big = max(sizes)
        shape = list(mine.shape)
        shape[axis] = big
        padded = torch.zeros(shape, dtype=torch.uint8, device=mine.device)
        padded.narrow(axis, 0, mine.shape[axis]).copy_(mine)
        every = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(every, padded)
        if not self.is_leader:
            return []
        return [t.narrow(axis, 0, sizes[r]) for r, t in enumerate(every)]

    def _result_array(self, size: int) -> np.ndarray:
        make = getattr(self, "result_array", None)
        if callable(make):
            return make((size,), np.uint8)
        return np.empty(size, np.uint8)

    def reset(self) -> None:
        """Drops the queued step of a pipelined run: what follows starts afresh."""
        self.pending = None
