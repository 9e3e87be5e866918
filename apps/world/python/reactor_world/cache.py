"""The KV cache: the session's state. One ``BlockCache`` per DiT block, preallocated once.

Its rules are the reference's (Self-Forcing's ``CausalWanSelfAttention`` with a local window,
LongLive's ``local_attn_size`` and ``sink_size``):

- a chunk's keys/values are written after what the cache holds; attention reads the cache up to
  and including them;
- writing the same chunk again (each denoising step, then the clean pass) overwrites its slot;
- when a new chunk does not fit, the oldest tokens after the sink are dropped by shifting the
  rest left (the sink, the session's first ``sink_frames`` frames, stays).

Indices are Python ints, so a step never waits for the GPU to read one back.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["BlockCache", "CrossCache"]


class BlockCache:
    """One block's self-attention keys and values: ``[B, capacity_tokens, heads, head_dim]``."""

    def __init__(self, batch: int, capacity: int, heads: int, head_dim: int, sink_tokens: int, dtype: torch.dtype, device: torch.device) -> None:
        self.k = torch.zeros([batch, capacity, heads, head_dim], dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.capacity = capacity
        self.sink = sink_tokens
        self.local_end = 0  # tokens of the cache in use
        self.global_end = 0  # the session position (tokens) after the newest written token

    def clear(self) -> None:
        """Forgets everything (a reset); the memory stays allocated."""
        self.local_end = 0
        self.global_end = 0

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2

    def write(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes a chunk's ``k``/``v`` (RoPE applied) at session position ``start`` (tokens);
        returns the keys and values its queries attend to."""
        n = k.shape[1]
        if n > self.capacity:
            raise ValueError(f"a chunk of {n} tokens does not fit a KV cache of {self.capacity}")
        end = start + n
        new = end > self.global_end
        if new and self.local_end + n > self.capacity:
            evicted = self.local_end + n - self.capacity
            kept = self.local_end - evicted - self.sink
            src = slice(self.sink + evicted, self.sink + evicted + kept)
            dst = slice(self.sink, self.sink + kept)
            self.k[:, dst] = self.k[:, src].clone()
            self.v[:, dst] = self.v[:, src].clone()
            self.local_end = self.local_end + n - evicted
        elif new:
            self.local_end += n
        lo = self.local_end - n
        self.k[:, lo : self.local_end] = k
        self.v[:, lo : self.local_end] = v
        self.global_end = end
        return self.k[:, : self.local_end], self.v[:, : self.local_end]


class CrossCache:
    """One block's cross-attention keys and values of the prompt (computed on the first call after a prompt)."""

    def __init__(self) -> None:
        self.k: Optional[torch.Tensor] = None
        self.v: Optional[torch.Tensor] = None

    def clear(self) -> None:
        self.k = None
        self.v = None
