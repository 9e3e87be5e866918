"""``TinyWorldWorker``: the tiny world's model half, one Python rank of ``TinyWorldApp``'s runner.

``load()`` builds ``ActionWanModel`` (``TINY_WORLD``), reads the shipped weights (``weights/
tiny-world.safetensors``, fp16) and checks them key by key against the config; ``generate()``
makes the next chunk of 3 frames from the held keys. The first call of a session (and the first
after ``reset``) returns the renderer's start chunk (the pose drawn from ``start``): the model
continues from real frames. Frames go out upscaled (nearest) by ``upscale``.

CPU: bf16 by default. Debian's torch 1.13 has a generic BLAS (about 1 GFLOP/s in fp32 matmuls)
while its oneDNN bf16 kernels run 50-100x faster, so bf16 is what makes the CPU playable.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np
import torch

from reactor_worker import DistributedWorker

from ..checkpoint import read_checkpoint
from ..configs import ConfigError
from ..worker import MAX_SEED, WorldInputInvalid, _device_of
from .model import TINY_WORLD, ActionWanModel, check_weights
from .render import ACTION_KEYS, World, random_pose, rollout
from .session import TinySession

__all__ = ["TinyWorldWorker", "check_weights"]


class TinyWorldWorker(DistributedWorker):
    def load(self, weights: str, dtype: str = "auto", upscale: int = 4, threads: Optional[int] = None, warmup: bool = True, **_ignored: Any) -> None:
        t0 = time.perf_counter()
        if self.world_size != 1:
            raise ConfigError(f"the tiny world runs on one rank (world size {self.world_size} given)")
        self.cfg = TINY_WORLD
        self.torch_device = _device_of(str(self.device))
        cuda = self.torch_device.type == "cuda"
        if threads and not cuda:
            torch.set_num_threads(threads)
        names = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
        if dtype != "auto" and dtype not in names:
            raise ConfigError(f"dtype {dtype!r} is not one of auto, bf16, fp16, fp32")
        self.dtype = names.get(dtype, torch.bfloat16)
        self.upscale = int(upscale)
        self.report_progress(0.1, f"reading {os.path.basename(weights)}")
        sd = read_checkpoint(weights)
        model = ActionWanModel(self.cfg)
        check_weights(sd, model.state_dict(), weights)
        model.load_state_dict({k: v.float() for k, v in sd.items()})
        self.model = model.to(self.torch_device, self.dtype).eval().requires_grad_(False)
        self.world = World()
        self.session = TinySession(self.model, self.cfg, self.torch_device, self.dtype)
        self.weights = weights
        self.report_progress(0.6, "warming up (two chunks)")
        if warmup:
            self._start(0)
            self.session.step(torch.zeros(3, len(ACTION_KEYS)))
            self.session.reset()
        self.load_ms = (time.perf_counter() - t0) * 1000
        self.report_progress(1.0, "ready")
        if self.is_leader:
            where = torch.cuda.get_device_name(self.torch_device) if cuda else f"CPU ({torch.get_num_threads()} threads)"
            print(f"tiny world: {sum(p.numel() for p in self.model.parameters()) / 1e6:.2f}M parameters from {weights}, {str(self.dtype).replace('torch.', '')} on {where}; loaded in {self.load_ms:.0f} ms", flush=True)

    def _start(self, start: int) -> np.ndarray:
        pose = random_pose(self.world, np.random.default_rng(start), 1)
        still = np.zeros((1, self.cfg.chunk_frames, len(ACTION_KEYS)), np.uint8)
        frames, _ = rollout(self.world, pose, still)
        self.session.start(torch.from_numpy(frames), torch.from_numpy(still))
        return frames[0]

    def _bits(self, keys: Any) -> np.ndarray:
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise WorldInputInvalid(f"keys must be a list of action names, got {keys!r}")
        bits = np.zeros(len(ACTION_KEYS), np.uint8)
        for k in keys:
            if k not in ACTION_KEYS:
                raise WorldInputInvalid(f"unknown action {k!r}; the tiny world's actions are {', '.join(ACTION_KEYS)}")
            bits[ACTION_KEYS.index(k)] = 1
        return bits

    def generate(self, inp: dict[str, Any]) -> dict[str, Any]:
        bits = self._bits(inp.get("keys", []))
        seed, start = inp.get("seed", 0), inp.get("start", 0)
        for name, v in (("seed", seed), ("start", start)):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_SEED:
                raise WorldInputInvalid(f"{name} must be an integer in 0..{MAX_SEED}, got {v!r}")
        t0 = time.perf_counter()
        started = self.session.frame == 0
        if started:
            frames = torch.from_numpy(self._start(start))
        else:
            frames = self.session.step(torch.from_numpy(np.repeat(bits[None], self.cfg.chunk_frames, axis=0)), seed=seed)[0].cpu()
        model_ms = (time.perf_counter() - t0) * 1000
        if self.upscale > 1:
            frames = frames.repeat_interleave(self.upscale, dim=1).repeat_interleave(self.upscale, dim=2)
        n, h, w, _ = frames.shape
        result = self.result_array((n, h, w, 3), np.uint8)
        torch.from_numpy(result).copy_(frames)
        return {
            "frames": result,
            "n": int(n),
            "width": int(w),
            "height": int(h),
            "chunk": self.session.chunk - 1,
            "fromRenderer": started,
            "keys": [ACTION_KEYS[i] for i in range(len(ACTION_KEYS)) if bits[i]],
            "modelMs": model_ms,
            "weights": self.weights,
        }

    def reset(self) -> None:
        """A new rollout: the next call starts again from the renderer's frames."""
        self.session.reset()
