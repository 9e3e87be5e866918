"""A session of chunked, cached generation: Self-Forcing's inference loop, one chunk a call.

For each chunk of ``chunk_frames`` latent frames:

1. draw its noise (from the session's seed and the chunk's index: a session replays);
2. denoise it in the few steps of the list: the DiT predicts the flow, ``x0`` follows, and all but
   the last step noise ``x0`` again to the next timestep; every pass reads the KV cache and writes
   the chunk's own keys into it;
3. run the DiT once more on the clean ``x0`` at ``context_noise`` (0), which writes the chunk's
   clean keys and values into the cache for the chunks after it;
4. decode the latents to frames (``decoder.py``, streamed).

The cache is the state: ``reset()`` clears it, and a prompt change re-caches it as LongLive does
(the frames still in the cache run again, clean, under the new prompt: the old prompt's keys and
the cross-attention of every layer above are replaced, the pictures stay).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

import torch

from .cache import BlockCache, CrossCache
from .configs import ModelConfig
from .decoder import DecoderState, TinyDecoder
from .model import CausalWanModel
from .scheduler import FlowMatch
from .text import PromptEncoder

__all__ = ["WorldSession", "ChunkOut", "ChunkCancelled"]


class ChunkCancelled(Exception):
    """The call making a chunk was cancelled (an urgent change): nothing of the chunk is kept."""


@dataclass
class ChunkOut:
    latents: torch.Tensor  # [B, F, C, h, w] clean latents of the chunk
    frames: torch.Tensor  # [n, 3, H, W] decoded, ~[0, 1]
    index: int  # the chunk's number in the session (0 = first)
    start_frame: int  # its first latent frame
    recached: bool
    timings: dict[str, float]


class WorldSession:
    """The model's per-session state (KV cache, decoder memory, prompt) and the loop that moves it."""

    def __init__(self, model: CausalWanModel, decoder: TinyDecoder, text: PromptEncoder, cfg: ModelConfig, device: torch.device, dtype: torch.dtype, batch: int = 1) -> None:
        self.model, self.decoder, self.text, self.cfg = model, decoder, text, cfg
        self.device, self.dtype, self.batch = device, dtype, batch
        self.flow = FlowMatch(cfg.timestep_shift)
        ft = cfg.frame_tokens
        self.caches = [BlockCache(batch, cfg.cache_tokens, cfg.num_heads, cfg.head_dim, cfg.sink_frames * ft, dtype, device) for _ in range(cfg.num_layers)]
        self.cross = [CrossCache() for _ in range(cfg.num_layers)]
        self.decoder_state = DecoderState()
        # Clean latents of the chunks whose keys the cache may still hold (for a re-cache).
        self.kept: deque[tuple[int, torch.Tensor]] = deque()
        self.first: Optional[tuple[int, torch.Tensor]] = None
        self.prompt: Optional[str] = None
        self.context: Optional[torch.Tensor] = None
        self.chunk = 0
        self.frame = 0
        #: False on a pipeline's stages other than the last (``staged.py``): they make no pictures.
        self.decodes = True
        #: Asked before each DiT pass of a chunk: True stops the chunk (an urgent change cancelled
        #: the call). The chunk's counters do not move, so the next call makes the same chunk again.
        self.should_stop = lambda: False

    @property
    def cache_bytes(self) -> int:
        return sum(c.nbytes for c in self.caches)

    def reset(self) -> None:
        """A new rollout: the cache, the decoder's memory and the counters start again; the prompt's embedding stays cached."""
        for c in self.caches:
            c.clear()
        for x in self.cross:
            x.clear()
        self.decoder_state.clear()
        self.kept.clear()
        self.first = None
        self.prompt = None
        self.context = None
        self.chunk = 0
        self.frame = 0

    def _set_prompt(self, prompt: str) -> bool:
        """Returns True when the prompt changed after frames exist (the cache is then re-encoded)."""
        if prompt == self.prompt:
            return False
        changed = self.prompt is not None and self.frame > 0
        self.prompt = prompt
        self.context = self.model.embed_text(self.text(prompt).to(self.dtype).expand(self.batch, -1, -1))
        for x in self.cross:
            x.clear()
        if changed:
            self._recache()
        return changed

    def _recache(self) -> None:
        """LongLive's KV re-cache: the kept chunks run again, clean, under the new prompt."""
        for c in self.caches:
            c.clear()
        chunks = ([self.first] if self.first is not None and (not self.kept or self.kept[0][0] != self.first[0]) else []) + list(self.kept)
        for start, lat in chunks:
            self._write_clean(lat, start)

    def _write_clean(self, lat: torch.Tensor, start: int) -> None:
        """The DiT pass over clean latents ``[B, F, C, h, w]`` at ``context_noise``: it writes their keys into the cache (its output is not used)."""
        t = torch.full([self.batch, lat.shape[1]], float(self.cfg.context_noise), device=self.device)
        # A pipeline's stages (staged.py) skip the head of a pass whose output nobody reads.
        write = getattr(self.model, "write_cache", self.model)
        write(lat.permute(0, 2, 1, 3, 4), t, self.context, self.caches, self.cross, start)

    def _keep(self, start: int, latents: torch.Tensor) -> None:
        if self.first is None:
            self.first = (start, latents)
        self.kept.append((start, latents))
        # Keep the newest chunks that still fill the window after the sink.
        room = self.cfg.window_frames - self.cfg.sink_frames
        while sum(l.shape[1] for _, l in self.kept) - self.kept[0][1].shape[1] >= room:
            self.kept.popleft()

    def denoise(self, noise: torch.Tensor, renoise: list[torch.Tensor], steps: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps 2 and 3 for the chunk at ``self.frame``: ``noise`` ``[B, F, C, h, w]``, one ``renoise`` per step after the first.
        Returns the clean latents and the first pass's flow prediction (``[B, F, C, h, w]`` each)."""
        b, f = noise.shape[0], noise.shape[1]
        ts = self.flow.warp(steps)
        x = noise
        first_flow = None
        x0 = x
        for i in range(len(ts)):
            if self.should_stop():
                raise ChunkCancelled(f"chunk {self.chunk} cancelled before denoising pass {i + 1} of {len(ts)}")
            t = torch.ones([b, f], device=self.device) * ts[i].to(self.device)
            flow = self.model(x.permute(0, 2, 1, 3, 4), t, self.context, self.caches, self.cross, self.frame).permute(0, 2, 1, 3, 4)
            if first_flow is None:
                first_flow = flow
            x0 = self.flow.to_x0(flow.flatten(0, 1), x.flatten(0, 1), t.flatten(0, 1)).unflatten(0, (b, f))
            if i < len(ts) - 1:
                nt = ts[i + 1].to(self.device) * torch.ones([b * f], device=self.device)
                x = self.flow.add_noise(x0.flatten(0, 1), renoise[i].reshape(x0.shape).flatten(0, 1), nt).unflatten(0, (b, f))
        self._write_clean(x0, self.frame)
        assert first_flow is not None
        return x0, first_flow

    def noise_for(self, seed: int, index: int, steps: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The chunk's noise and its renoise draws, from ``(seed, index)`` alone."""
        cfg = self.cfg
        gen = torch.Generator(device=self.device).manual_seed((seed * 1_000_003 + index) & ((1 << 63) - 1))
        shape = [self.batch, cfg.chunk_frames, cfg.in_dim, cfg.latent_height, cfg.latent_width]
        noise = torch.randn(shape, generator=gen, device=self.device, dtype=torch.float32).to(self.dtype)
        renoise = [torch.randn(shape, generator=gen, device=self.device, dtype=torch.float32).to(self.dtype) for _ in range(steps - 1)]
        return noise, renoise

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.no_grad()
    def step(self, prompt: str, seed: int, steps: tuple[int, ...], noise: Optional[tuple[torch.Tensor, list[torch.Tensor]]] = None) -> ChunkOut:
        """One chunk: the next ``chunk_frames`` latent frames and their pictures."""
        t0 = time.perf_counter()
        recached = self._set_prompt(prompt)
        self._sync()
        t1 = time.perf_counter()
        n, r = noise if noise is not None else self.noise_for(seed, self.chunk, len(steps))
        x0, _ = self.denoise(n, r, steps)
        self._sync()
        t2 = time.perf_counter()
        frames = self.decoder.decode(x0[0].to(next(self.decoder.parameters()).dtype), self.decoder_state) if self.decodes else x0.new_zeros(0, 3, 0, 0)
        self._sync()
        t3 = time.perf_counter()
        out = ChunkOut(x0, frames, self.chunk, self.frame, recached, {"recacheMs": (t1 - t0) * 1000, "ditMs": (t2 - t1) * 1000, "decodeMs": (t3 - t2) * 1000})
        self._keep(self.frame, x0)
        self.frame += x0.shape[1]
        self.chunk += 1
        return out
