"""The world model as a pipeline over ranks (issue 39): two shapes, the same frames as one rank.

- ``blocks`` (shape a): the DiT's blocks split into contiguous stages, one a rank. Every DiT pass
  runs stage after stage: rank 0 embeds the chunk and runs its blocks, each rank hands the tokens
  on (``reactor_worker.pipeline.send_tensor``), the last runs the head and sends the flow back to
  every rank, which all step the sampler identically. Each rank's KV cache holds its own blocks.
- ``steps`` (shape b): the denoising steps split over the ranks (Live Avatar's shape): rank 0 runs
  the first steps of a chunk and hands the noised latents on; the last rank finishes the chunk,
  sends its clean latents to every rank, and every rank writes them into its own cache (a full
  cache a rank: the clean pass is repeated on each), so the next chunk's steps see the same keys.

Bit-exact with ``WorldSession`` on one rank: each rank runs the same operations on the same
tensors, in the same order (the sends move bytes, nothing is recomputed differently).

How much the ranks overlap is set by the maths: chunk k+1's first pass needs chunk k's clean keys
(the causal cache), so a chunk waits for the one before it. What overlaps is the tail of a chunk
(the clean pass and the decode on the last rank) with the head of the next on the first rank:
``docs/world-model.md`` ("Pipelines") has the figures.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from reactor_worker.pipeline import recv_tensor, send_tensor

from .cache import BlockCache, CrossCache
from .configs import ConfigError
from .model import CausalWanModel, rope_factors, sinusoidal_embedding
from .pipeline import WorldSession

__all__ = ["BlockStages", "StepStagesSession", "split"]


def split(n: int, parts: int, what: str) -> list[tuple[int, int]]:
    """``n`` items in ``parts`` contiguous ranges, as even as they go (the first ones longer)."""
    if parts > n:
        raise ConfigError(f"{n} {what} do not split over {parts} ranks: use at most {n} ranks, or pipeline: none")
    out, at = [], 0
    for p in range(parts):
        size = n // parts + (1 if p < n % parts else 0)
        out.append((at, at + size))
        at += size
    return out


class BlockStages:
    """Shape a: stands in for the model in ``WorldSession`` (``model(x, t, ...)`` returns the flow on every rank)."""

    def __init__(self, model: CausalWanModel, rank: int, world_size: int, device: torch.device) -> None:
        self.model, self.rank, self.world, self.device = model, rank, world_size, device
        self.lo, self.hi = split(model.cfg.num_layers, world_size, "DiT blocks")[rank]
        self.last = rank == world_size - 1
        self.dtype = next(model.parameters()).dtype

    def embed_text(self, prompt_embeds: torch.Tensor) -> torch.Tensor:
        return self.model.embed_text(prompt_embeds)

    def __call__(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, caches: list[BlockCache], cross: Optional[list[CrossCache]], start_frame: int) -> torch.Tensor:
        out = self._run(x, t, context, caches, cross, start_frame, True)
        assert out is not None
        return out

    def write_cache(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, caches: list[BlockCache], cross: Optional[list[CrossCache]], start_frame: int) -> None:
        """The clean pass: every stage writes its blocks' keys; no head, no flow sent back."""
        self._run(x, t, context, caches, cross, start_frame, False)

    def _run(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, caches: list[BlockCache], cross: Optional[list[CrossCache]], start_frame: int, output: bool) -> Optional[torch.Tensor]:
        # CausalWanModel.forward, with its blocks split: the same operations on every stage.
        m, cfg = self.model, self.model.cfg
        p = cfg.patch_size
        frames, h, w = x.shape[2] // p[0], x.shape[3] // p[1], x.shape[4] // p[2]
        e = m.time_embedding(sinusoidal_embedding(cfg.freq_dim, t.flatten()).to(self.dtype))
        e0 = m.time_projection(e).unflatten(1, (6, cfg.dim)).unflatten(0, t.shape)
        rope = rope_factors(cfg.head_dim, frames, h, w, start_frame, self.device)
        if not m.compiled:
            rope = torch.complex(rope[0], rope[1])
        tokens = [x.shape[0], frames * h * w, cfg.dim]
        if self.rank == 0:
            hidden = m.patch_embedding(x).flatten(2).transpose(1, 2)
        else:
            hidden = recv_tensor(self.rank - 1, shape=tokens, dtype=self.dtype, device=self.device)
        start_token = start_frame * h * w
        for i in range(self.lo, self.hi):
            hidden = m.blocks[i](hidden, e0, rope, context, caches[i], cross[i] if cross is not None else None, start_token)
        if not self.last:
            send_tensor(hidden, self.rank + 1)
        if not output:
            return None
        if self.last:
            flow = m.unpatchify(m.head(hidden, e.unflatten(0, t.shape).unsqueeze(2)), frames, h, w)
            for r in range(self.world - 1):
                send_tensor(flow, r)
            return flow
        return recv_tensor(self.world - 1, shape=list(x.shape), dtype=x.dtype, device=self.device)


class StepStagesSession(WorldSession):
    """Shape b: each rank runs its share of a chunk's denoising steps; every rank keeps a full cache."""

    def __init__(self, *args: Any, rank: int, world_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rank, self.world = rank, world_size
        self.last = rank == world_size - 1
        self.decodes = self.last

    def denoise(self, noise: torch.Tensor, renoise: list[torch.Tensor], steps: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        b, f = noise.shape[0], noise.shape[1]
        ts = self.flow.warp(steps)
        lo, hi = split(len(ts), self.world, "denoising steps")[self.rank]
        # WorldSession.denoise's loop, from step lo to hi: the input comes from the rank before.
        x = noise if self.rank == 0 else recv_tensor(self.rank - 1, shape=list(noise.shape), dtype=noise.dtype, device=self.device)
        x0 = x
        flow = x
        for i in range(lo, hi):
            t = torch.ones([b, f], device=self.device) * ts[i].to(self.device)
            flow = self.model(x.permute(0, 2, 1, 3, 4), t, self.context, self.caches, self.cross, self.frame).permute(0, 2, 1, 3, 4)
            x0 = self.flow.to_x0(flow.flatten(0, 1), x.flatten(0, 1), t.flatten(0, 1)).unflatten(0, (b, f))
            if i < len(ts) - 1:
                nt = ts[i + 1].to(self.device) * torch.ones([b * f], device=self.device)
                x = self.flow.add_noise(x0.flatten(0, 1), renoise[i].reshape(x0.shape).flatten(0, 1), nt).unflatten(0, (b, f))
        if not self.last:
            send_tensor(x, self.rank + 1)
            x0 = recv_tensor(self.world - 1, shape=list(noise.shape), dtype=noise.dtype, device=self.device)
        else:
            for r in range(self.world - 1):
                send_tensor(x0, r)
        self._write_clean(x0, self.frame)
        return x0, flow
