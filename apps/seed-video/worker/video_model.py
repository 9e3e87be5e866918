"""A small sequence-parallel video model: the ``video_model`` module the seed's ``video_worker.py`` imports.

A transformer over frame patches, conditioned on the prompt. Every generate() makes one chunk
of ``frames_per_chunk`` frames: the chunk's tokens (one per patch of every frame) are split in
contiguous slices across the ranks; in every layer each rank computes queries, keys and values
for its own slice, ``all_gather``s the keys and values of every rank, and attends over the whole
chunk. The pixels of each slice are then gathered onto rank 0, which returns the frames. The last
frame's hidden state carries motion into the next chunk; after ``rollout_chunks`` chunks every
rank raises :class:`RolloutExhausted` until ``reset()``.

The weights are random but seeded (``seed``), so every rank builds the same ones; an optional
``<weights_root>/config.json`` overrides any of :data:`DEFAULTS`. On CPU the model computes in
float64: its output is the same at every world size (the slices are computed row by row with
the same keys and values; only float64 rounding in the matrix products could differ, far below
one uint8 level). On CUDA it computes in float32.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch

DEFAULTS: Dict[str, Any] = {
    "width": 64,
    "height": 48,
    "patch": 8,
    "frames_per_chunk": 4,
    "dim": 64,
    "heads": 4,
    "layers": 2,
    "rollout_chunks": 16,
    "seed": 1234,
}


@dataclass
class VideoInput:
    """One step's input: what the video shows."""

    prompt: str = "A walk through a forest."


@dataclass
class VideoResult:
    """One chunk: ``frames`` is ``(count, height, width, 3)`` uint8 RGB on the CPU (empty on ranks other than 0)."""

    frames: np.ndarray
    width: int
    height: int
    count: int
    chunk: int = 0
    prompt: str = ""
    shape: list = field(default_factory=list)


class RolloutExhausted(Exception):
    """Raised by every rank once a rollout has made ``rollout_chunks`` chunks: reset() starts a new one."""

    def __init__(self, chunks: int) -> None:
        super().__init__(f"the rollout is exhausted after {chunks} chunks: reset() to start a new one")
        self.chunks = chunks


class ParallelVideoModel:
    def __init__(self, weights_root: Optional[Path], device: str, rank: int, world_size: int) -> None:
        cfg = dict(DEFAULTS)
        if weights_root is not None and (Path(weights_root) / "config.json").is_file():
            cfg.update(json.loads((Path(weights_root) / "config.json").read_text()))
        self.cfg = cfg
        self.rank = rank
        self.world_size = world_size
        self.device = torch.device(device)
        self.dtype = torch.float64 if self.device.type == "cpu" else torch.float32
        p = cfg["patch"]
        if cfg["width"] % p or cfg["height"] % p:
            raise ValueError(f"width {cfg['width']} and height {cfg['height']} must be multiples of patch {p}")
        self.gw, self.gh = cfg["width"] // p, cfg["height"] // p
        self.per_frame = self.gw * self.gh
        self.tokens = self.per_frame * cfg["frames_per_chunk"]
        if self.tokens % world_size:
            raise ValueError(f"{self.tokens} tokens per chunk cannot be split evenly across {world_size} ranks")
        self.local = self.tokens // world_size
        if world_size > 1:
            from reactor_worker import init_distributed

            init_distributed()
        self._build_weights()
        self.reset()

    # ---- weights ---------------------------------------------------------------------------

    def _build_weights(self) -> None:
        c = self.cfg
        g = torch.Generator().manual_seed(int(c["seed"]))
        d = c["dim"]

        def w(*shape: int, scale: float = 1.0) -> torch.Tensor:
            fan_in = shape[0]
            t = torch.randn(*shape, generator=g, dtype=torch.float64) * (scale / math.sqrt(fan_in))
            return t.to(self.device, self.dtype)

        self.pos = w(self.per_frame, d, scale=math.sqrt(self.per_frame))
        self.time_proj = w(16, d)
        self.state_proj = w(d, d, scale=0.5)
        self.layers = []
        for _ in range(c["layers"]):
            self.layers.append(
                {
                    "q": w(d, d),
                    "k": w(d, d),
                    "v": w(d, d),
                    "o": w(d, d, scale=0.5),
                    "up": w(d, 4 * d),
                    "down": w(4 * d, d, scale=0.5),
                }
            )
        self.head = w(d, c["patch"] * c["patch"] * 3, scale=2.0)

    def _prompt_embedding(self, prompt: str) -> torch.Tensor:
        seed = int.from_bytes(hashlib.sha256(prompt.encode("utf8")).digest()[:8], "little")
        g = torch.Generator().manual_seed(seed)
        return torch.randn(self.cfg["dim"], generator=g, dtype=torch.float64).to(self.device, self.dtype)

    # ---- state -----------------------------------------------------------------------------

    def reset(self) -> None:
        self.chunk = 0
        self.state = torch.zeros(self.per_frame, self.cfg["dim"], device=self.device, dtype=self.dtype)

    def state_dict(self) -> Dict[str, Any]:
        """What a session snapshot keeps: the chunk counter and the motion state (CPU, float64)."""
        return {"chunk": self.chunk, "state": self.state.to("cpu", torch.float64).contiguous(), "shape": list(self.state.shape)}

    def load_state_dict(self, d: Dict[str, Any]) -> None:
        """Puts back what :meth:`state_dict` returned (its arrays arrive flat)."""
        shape = [int(n) for n in d["shape"]]
        if shape != list(self.state.shape):
            raise ValueError(f"the snapshot's motion state is {shape}, this model's is {list(self.state.shape)}")
        self.state = torch.as_tensor(np.asarray(d["state"], dtype=np.float64)).reshape(shape).to(self.device, self.dtype)
        self.chunk = int(d["chunk"])

    # ---- one chunk -------------------------------------------------------------------------

    def _all_gather(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        import torch.distributed as dist

        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, 0)

    def _embed(self, prompt: str) -> torch.Tensor:
        """The tokens of this rank's slice of the chunk."""
        c = self.cfg
        lo = self.rank * self.local
        idx = torch.arange(lo, lo + self.local, device=self.device)
        frame = idx // self.per_frame
        patch = idx % self.per_frame
        t = (self.chunk * c["frames_per_chunk"] + frame).to(self.dtype)
        freqs = torch.exp(torch.linspace(-4.0, 0.0, 8, dtype=torch.float64)).to(self.device, self.dtype)
        angles = t[:, None] * freqs[None, :]
        time = torch.cat([torch.sin(angles), torch.cos(angles)], 1) @ self.time_proj
        return self.pos[patch] + time + self._prompt_embedding(prompt)[None, :] + self.state[patch] @ self.state_proj

    @staticmethod
    def _norm(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, x.shape[-1:])

    def _layer(self, x: torch.Tensor, w: Dict[str, torch.Tensor]) -> torch.Tensor:
        h = self.cfg["heads"]
        d = x.shape[1]
        hd = d // h
        n = self._norm(x)
        q = (n @ w["q"]).view(-1, h, hd).transpose(0, 1)
        # Sequence parallelism: every rank needs every token's keys and values.
        k = self._all_gather(n @ w["k"]).view(-1, h, hd).transpose(0, 1)
        v = self._all_gather(n @ w["v"]).view(-1, h, hd).transpose(0, 1)
        att = torch.softmax((q @ k.transpose(1, 2)) / math.sqrt(hd), dim=-1)
        x = x + (att @ v).transpose(0, 1).reshape(-1, d) @ w["o"]
        n = self._norm(x)
        return x + torch.nn.functional.gelu(n @ w["up"]) @ w["down"]

    @torch.no_grad()
    def generate(self, input: VideoInput) -> VideoResult:
        c = self.cfg
        if self.chunk >= c["rollout_chunks"]:
            raise RolloutExhausted(self.chunk)
        x = self._embed(input.prompt)
        for w in self.layers:
            x = self._layer(x, w)
        # Motion carries on from the chunk's last frame (every rank keeps the same state).
        full = self._all_gather(x)
        self.state = full[-self.per_frame :].clone()
        pixels = torch.sigmoid(self._norm(x) @ self.head)
        local = (pixels * 255.0).round().clamp(0, 255).to(torch.uint8)
        self.chunk += 1
        frames = self._gather_to_leader(local)
        if frames is not None:
            frames = frames.cpu()
        p, n = c["patch"], c["frames_per_chunk"]
        shape = [n, c["height"], c["width"], 3] if frames is not None else [0, c["height"], c["width"], 3]
        if frames is None:
            return VideoResult(np.empty(shape, np.uint8), c["width"], c["height"], 0, self.chunk, input.prompt, shape)
        # (frame, patch row, patch col, py, px, rgb) -> (frame, row, col, rgb)
        img = frames.view(n, self.gh, self.gw, p, p, 3).permute(0, 1, 3, 2, 4, 5).reshape(shape)
        return VideoResult(np.ascontiguousarray(img.numpy()), c["width"], c["height"], n, self.chunk, input.prompt, shape)

    def _gather_to_leader(self, local: torch.Tensor) -> Optional[torch.Tensor]:
        """Every rank's pixels onto rank 0 (None elsewhere): the runner returns rank 0's result only."""
        if self.world_size == 1:
            return local
        import torch.distributed as dist

        if self.rank == 0:
            parts = [torch.empty_like(local) for _ in range(self.world_size)]
            dist.gather(local, gather_list=parts, dst=0)
            return torch.cat(parts, 0)
        dist.gather(local, dst=0)
        return None
