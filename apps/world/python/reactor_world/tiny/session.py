"""A played session of the tiny world: ``WorldSession``'s loop (``pipeline.py``) with keys in.

The session starts from frames the renderer drew (the start pose: a chunk of 3 frames, written
clean into the KV cache, as DIAMOND starts from real frames); each ``step`` then makes the next
chunk of 3 frames from the held keys of those frames: noise from ``(seed, chunk)``, the 4
flow-matching steps of the config (each pass reads the cache and writes the chunk into it), and
one clean pass at ``context_noise`` that leaves the chunk's clean keys in the cache for the
chunks after it. The cache rolls over 4 chunks (``TINY_WORLD``), so a session runs for ever.
"""

from __future__ import annotations

import time
from typing import Optional

import torch

from ..cache import BlockCache
from ..configs import ModelConfig
from ..scheduler import FlowMatch
from .model import ActionWanModel

__all__ = ["TinySession", "to_pixels", "from_pixels"]


def from_pixels(frames: torch.Tensor) -> torch.Tensor:
    """uint8 ``[B, T, H, W, 3]`` -> model space ``[B, 3, T, H, W]`` in [-1, 1] (float32)."""
    return frames.permute(0, 4, 1, 2, 3).float().div(127.5).sub(1)


def to_pixels(x: torch.Tensor) -> torch.Tensor:
    """Model space ``[B, 3, T, H, W]`` -> uint8 ``[B, T, H, W, 3]``."""
    return x.float().add(1).mul(127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 4, 1)


class TinySession:
    """The KV cache of one (batched) rollout and the loop that moves it."""

    def __init__(self, model: ActionWanModel, cfg: ModelConfig, device: torch.device, dtype: torch.dtype, batch: int = 1) -> None:
        self.model, self.cfg, self.device, self.dtype, self.batch = model, cfg, device, dtype, batch
        self.flow = FlowMatch(cfg.timestep_shift)
        ft = cfg.frame_tokens
        self.caches = [BlockCache(batch, cfg.cache_tokens, cfg.num_heads, cfg.head_dim, cfg.sink_frames * ft, dtype, device) for _ in range(cfg.num_layers)]
        self.chunk = 0
        self.frame = 0
        self.last_ms: dict[str, float] = {}

    @property
    def cache_bytes(self) -> int:
        return sum(c.nbytes for c in self.caches)

    def reset(self) -> None:
        for c in self.caches:
            c.clear()
        self.chunk = 0
        self.frame = 0

    def _actions(self, actions: torch.Tensor) -> torch.Tensor:
        a = torch.as_tensor(actions, device=self.device).to(self.dtype)
        if a.dim() == 2:
            a = a.unsqueeze(0).expand(self.batch, -1, -1)
        want = (self.batch, self.cfg.chunk_frames, self.model.num_actions)
        if tuple(a.shape) != want:
            raise ValueError(f"actions must be {list(want)} (batch, frames of a chunk, keys), got {list(a.shape)}")
        return a

    def _cache_clean(self, x0: torch.Tensor, actions: torch.Tensor, gen: Optional[torch.Generator]) -> None:
        """The clean pass: the chunk's keys at ``context_noise`` go into the cache for the chunks after it."""
        b, f = x0.shape[0], x0.shape[2]
        t = torch.full([b, f], float(self.cfg.context_noise), device=self.device)
        x = x0
        if self.cfg.context_noise > 0:
            sig = float(self.flow.sigma(t[:1, :1]).item())
            noise = torch.randn(x0.shape, generator=gen, device=self.device, dtype=torch.float32).to(self.dtype)
            x = (1 - sig) * x0 + sig * noise
        self.model(x, t, actions, self.caches, self.frame)

    @torch.no_grad()
    def start(self, frames: torch.Tensor, actions: torch.Tensor) -> None:
        """Writes a chunk of real frames (uint8 ``[B, 3, H, W, 3]``, from the renderer) and their actions as chunk 0."""
        self.reset()
        x0 = from_pixels(torch.as_tensor(frames)).to(self.device, self.dtype)
        gen = torch.Generator(device=self.device).manual_seed(0)
        self._cache_clean(x0, self._actions(actions), gen)
        self.frame += x0.shape[2]
        self.chunk += 1

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.no_grad()
    def step(self, actions: torch.Tensor, seed: int = 0, steps: Optional[tuple[int, ...]] = None) -> torch.Tensor:
        """The next chunk under ``actions`` (``[B, 3, 6]`` or ``[3, 6]`` held-key bits): uint8 ``[B, 3, H, W, 3]``."""
        if self.frame == 0:
            raise RuntimeError("a tiny-world session starts from the renderer's frames: call start() first")
        t0 = time.perf_counter()
        cfg = self.cfg
        a = self._actions(actions)
        steps = steps or cfg.denoising_steps
        gen = torch.Generator(device=self.device).manual_seed((seed * 1_000_003 + self.chunk) & ((1 << 63) - 1))
        shape = [self.batch, cfg.in_dim, cfg.chunk_frames, cfg.height, cfg.width]
        x = torch.randn(shape, generator=gen, device=self.device, dtype=torch.float32).to(self.dtype)
        ts = self.flow.warp(steps)
        b, f = self.batch, cfg.chunk_frames
        x0 = x
        for i in range(len(ts)):
            t = torch.ones([b, f], device=self.device) * ts[i].to(self.device)
            flow = self.model(x, t, a, self.caches, self.frame)
            sig = self.flow.sigma(t[:, :1]).to(self.dtype).view(b, 1, 1, 1, 1)
            x0 = (x.double() - sig.double() * flow.double()).to(self.dtype)
            if i < len(ts) - 1:
                nsig = self.flow.sigma(ts[i + 1].reshape(1)).to(self.dtype).item()
                noise = torch.randn(shape, generator=gen, device=self.device, dtype=torch.float32).to(self.dtype)
                x = (1 - nsig) * x0 + nsig * noise
        self._cache_clean(x0, a, gen)
        out = to_pixels(x0)
        self._sync()
        self.last_ms = {"totalMs": (time.perf_counter() - t0) * 1000}
        self.frame += f
        self.chunk += 1
        return out
