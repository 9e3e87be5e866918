"""The causal Wan2.1 DiT: the denoiser of Self-Forcing, CausVid and LongLive, written here.

The architecture and the parameter names are Wan2.1-T2V's (``wan/modules/model.py``) in its
block-causal form (Self-Forcing's ``wan/modules/causal_model.py``), so a checkpoint in their key
layout loads as it is (``checkpoint.py``):

- a 1x2x2 ``Conv3d`` patch embedding of the 16-channel latent;
- ``num_layers`` blocks, each: adaLN-style modulation by the timestep (six vectors a frame), RMS-
  normalised q/k self-attention with 3-D RoPE (time, height, width) over the KV cache, cross-
  attention to the text embedding, a tanh-GELU FFN;
- a modulated head and the unpatchify back to latent frames.

The block-causal attention of inference is the cache itself: a chunk's queries read every key
in the cache, which holds the earlier chunks' clean keys and this chunk's own. What differs from
the reference, by design, and keeps its maths:

- the cache indices are Python ints, not tensors read back with ``.item()`` (no GPU sync per
  block); rope factors are computed once per call, not once per block (the same float64 values);
- RoPE positions past the reference's 1,024-frame table are computed by the same formula, so a
  session can run past 4,096 video frames;
- attention runs in the model's dtype (the reference casts to bf16 for flash-attn): see
  ``attention.py``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn

from .attention import attention
from .cache import BlockCache, CrossCache
from .configs import ModelConfig

__all__ = ["CausalWanModel", "sinusoidal_embedding", "rope_factors"]


def sinusoidal_embedding(dim: int, position: torch.Tensor) -> torch.Tensor:
    """Wan's timestep embedding: ``[cos, sin]`` of ``position / 10000^(i / half)``, in float64."""
    half = dim // 2
    position = position.to(torch.float64)
    sinusoid = torch.outer(position, torch.pow(10000, -torch.arange(half, device=position.device).to(position).div(half)))
    return torch.cat([torch.cos(sinusoid), torch.sin(sinusoid)], dim=1)


def _rope_angles(positions: torch.Tensor, dim: int, theta: float = 10000.0) -> torch.Tensor:
    """``rope_params`` of the reference for the given positions: unit complex numbers, float64."""
    inv = 1.0 / torch.pow(theta, torch.arange(0, dim, 2, device=positions.device).to(torch.float64).div(dim))
    angles = torch.outer(positions.to(torch.float64), inv)
    return torch.polar(torch.ones_like(angles), angles)


def rope_factors(head_dim: int, frames: int, h: int, w: int, start_frame: int, device: torch.device) -> torch.Tensor:
    """The complex RoPE factor of every token of a chunk: ``[frames * h * w, 1, head_dim / 2]``.

    The head's channels split as the reference splits them: ``d - 4 * (d // 6)`` for time, then
    ``2 * (d // 6)`` each for height and width (halved as complex pairs).
    """
    c = head_dim // 2
    dt, dh, dw = head_dim - 4 * (head_dim // 6), 2 * (head_dim // 6), 2 * (head_dim // 6)
    assert dt // 2 + dh // 2 + dw // 2 == c
    ft = _rope_angles(torch.arange(start_frame, start_frame + frames, device=device), dt)
    fh = _rope_angles(torch.arange(h, device=device), dh)
    fw = _rope_angles(torch.arange(w, device=device), dw)
    f = torch.cat(
        [
            ft.view(frames, 1, 1, -1).expand(frames, h, w, -1),
            fh.view(1, h, 1, -1).expand(frames, h, w, -1),
            fw.view(1, 1, w, -1).expand(frames, h, w, -1),
        ],
        dim=-1,
    )
    f = f.reshape(frames * h * w, 1, c)
    # Real and imaginary parts: the rotation below is real arithmetic, which torch.compile
    # generates code for (its inductor has no complex kernels).
    return torch.stack([f.real, f.imag])


def apply_rope(x: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """Rotates ``x`` (``[B, L, heads, head_dim]``) by ``factors`` in float64, back in ``x``'s dtype:
    the reference's complex product. ``factors`` is complex (eager: one kernel) or, for compiled
    blocks, ``rope_factors``' real and imaginary parts, the product written out (the same numbers)."""
    b, s, n, _ = x.shape
    if factors.is_complex():
        xc = torch.view_as_complex(x.to(torch.float64).reshape(b, s, n, -1, 2))
        return torch.view_as_real(xc * factors.unsqueeze(0)).flatten(3).type_as(x)
    pairs = x.to(torch.float64).reshape(b, s, n, -1, 2)
    a, bi = pairs[..., 0], pairs[..., 1]
    c, d = factors[0].unsqueeze(0), factors[1].unsqueeze(0)
    return torch.stack([a * c - bi * d, a * d + bi * c], dim=-1).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class LayerNorm(nn.LayerNorm):
    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = False) -> None:
        super().__init__(dim, elementwise_affine=elementwise_affine, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return super().forward(x).type_as(x)


class SelfAttention(nn.Module):
    """q/k/v/o projections, RMS q/k norms; reads and writes one block's KV cache."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool, eps: float) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.q, self.k, self.v, self.o = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.norm_q = RMSNorm(dim, eps) if qk_norm else nn.Identity()
        self.norm_k = RMSNorm(dim, eps) if qk_norm else nn.Identity()

    def qkv(self, x: torch.Tensor, rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, s, n, d = x.shape[0], x.shape[1], self.num_heads, self.head_dim
        q = apply_rope(self.norm_q(self.q(x)).view(b, s, n, d), rope)
        k = apply_rope(self.norm_k(self.k(x)).view(b, s, n, d), rope)
        return q, k, self.v(x).view(b, s, n, d)


class CrossAttention(nn.Module):
    """Text cross-attention; the text's keys and values are computed once per prompt (``CrossCache``)."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool, eps: float) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.q, self.k, self.v, self.o = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.norm_q = RMSNorm(dim, eps) if qk_norm else nn.Identity()
        self.norm_k = RMSNorm(dim, eps) if qk_norm else nn.Identity()

    def kv(self, context: torch.Tensor, cache: Optional[CrossCache]) -> tuple[torch.Tensor, torch.Tensor]:
        """The text's keys and values (once per prompt when cached)."""
        if cache is not None and cache.k is not None and cache.v is not None:
            return cache.k, cache.v
        b, n, d = context.shape[0], self.num_heads, self.head_dim
        k = self.norm_k(self.k(context)).view(b, -1, n, d)
        v = self.v(context).view(b, -1, n, d)
        if cache is not None:
            cache.k, cache.v = k, v
        return k, v

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape[0], self.num_heads, self.head_dim
        q = self.norm_q(self.q(x)).view(b, -1, n, d)
        return self.o(attention(q, k, v).flatten(2))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim = cfg.dim
        self.norm1 = LayerNorm(dim, cfg.eps)
        self.self_attn = SelfAttention(dim, cfg.num_heads, cfg.qk_norm, cfg.eps)
        self.norm3 = LayerNorm(dim, cfg.eps, elementwise_affine=True) if cfg.cross_attn_norm else nn.Identity()
        self.cross_attn = CrossAttention(dim, cfg.num_heads, cfg.qk_norm, cfg.eps)
        self.norm2 = LayerNorm(dim, cfg.eps)
        self.ffn = nn.Sequential(nn.Linear(dim, cfg.ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(cfg.ffn_dim, dim))
        self.modulation = nn.Parameter(torch.randn(1, 6, dim) / dim**0.5)

    # A block is three parts: `pre` (modulation, q/k/v, RoPE) and `post` (the attention's
    # output, cross-attention, FFN) are fixed-shape tensor code, which `compile()` hands to
    # torch.compile; the KV cache's write and the attention over it, whose lengths change
    # chunk by chunk, stay between them, eager (the attention is one fused kernel already).
    def pre(self, x: torch.Tensor, e: torch.Tensor, rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        frames = e.shape[1]
        m = (self.modulation.unsqueeze(1) + e).chunk(6, dim=2)  # each [B, F, 1, C]
        h = (self.norm1(x).unflatten(1, (frames, x.shape[1] // frames)) * (1 + m[1]) + m[0]).flatten(1, 2)
        q, k, v = self.self_attn.qkv(h, rope)
        return q.type_as(v), k, v, (self.modulation.unsqueeze(1) + e)

    def post(self, x: torch.Tensor, y: torch.Tensor, me: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor) -> torch.Tensor:
        frames = me.shape[1]
        per = x.shape[1] // frames
        m = me.chunk(6, dim=2)
        x = x + (self.self_attn.o(y.flatten(2)).unflatten(1, (frames, per)) * m[2]).flatten(1, 2)
        x = x + self.cross_attn(self.norm3(x), ck, cv)
        y2 = self.ffn((self.norm2(x).unflatten(1, (frames, per)) * (1 + m[4]) + m[3]).flatten(1, 2))
        return x + (y2.unflatten(1, (frames, per)) * m[5]).flatten(1, 2)

    def forward(self, x: torch.Tensor, e: torch.Tensor, rope: torch.Tensor, context: torch.Tensor, cache: BlockCache,
                cross: Optional[CrossCache], start_token: int) -> torch.Tensor:
        q, k, v, me = self.pre(x, e, rope)
        keys, values = cache.write(k, v, start_token)
        y = attention(q, keys, values)
        ck, cv = self.cross_attn.kv(context, cross)
        return self.post(x, y, me, ck, cv)


class Head(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = LayerNorm(cfg.dim, cfg.eps)
        self.head = nn.Linear(cfg.dim, math.prod(cfg.patch_size) * cfg.out_dim)
        self.modulation = nn.Parameter(torch.randn(1, 2, cfg.dim) / cfg.dim**0.5)

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        frames = e.shape[1]
        m = (self.modulation.unsqueeze(1) + e).chunk(2, dim=2)
        return self.head(self.norm(x).unflatten(1, (frames, x.shape[1] // frames)) * (1 + m[1]) + m[0])


class CausalWanModel(nn.Module):
    """Wan2.1's T2V DiT for chunked, cached inference. ``forward`` takes one chunk of noisy latents."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        dim = cfg.dim
        self.patch_embedding = nn.Conv3d(cfg.in_dim, dim, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.text_embedding = nn.Sequential(nn.Linear(cfg.text_dim, dim), nn.GELU(approximate="tanh"), nn.Linear(dim, dim))
        self.time_embedding = nn.Sequential(nn.Linear(cfg.freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, dim * 6))
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.num_layers)])
        self.head = Head(cfg)
        self.compiled = False

    def embed_text(self, prompt_embeds: torch.Tensor) -> torch.Tensor:
        """``[B, L, text_dim]`` (L <= text_len) -> ``[B, text_len, dim]``: zero-padded to ``text_len`` first, as the reference pads."""
        b, length, width = prompt_embeds.shape
        if length < self.cfg.text_len:
            prompt_embeds = torch.cat([prompt_embeds, prompt_embeds.new_zeros(b, self.cfg.text_len - length, width)], dim=1)
        return self.text_embedding(prompt_embeds[:, : self.cfg.text_len])

    def forward(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, caches: list[BlockCache],
                cross: Optional[list[CrossCache]], start_frame: int) -> torch.Tensor:
        """The flow prediction of one chunk.

        ``x``: ``[B, C, F, H, W]`` noisy latents at timesteps ``t`` (``[B, F]``); ``context``:
        ``embed_text``'s output; ``caches``: one ``BlockCache`` a block; ``start_frame``: the
        chunk's first latent frame in the session (its RoPE position and cache slot).
        Returns ``[B, C, F, H, W]``.
        """
        cfg = self.cfg
        x = self.patch_embedding(x)
        frames, h, w = x.shape[2], x.shape[3], x.shape[4]
        x = x.flatten(2).transpose(1, 2)
        e = self.time_embedding(sinusoidal_embedding(cfg.freq_dim, t.flatten()).type_as(x))
        e0 = self.time_projection(e).unflatten(1, (6, cfg.dim)).unflatten(0, t.shape)
        rope = rope_factors(cfg.head_dim, frames, h, w, start_frame, x.device)
        if not self.compiled:
            rope = torch.complex(rope[0], rope[1])
        start_token = start_frame * h * w
        for i, block in enumerate(self.blocks):
            x = block(x, e0, rope, context, caches[i], cross[i] if cross is not None else None, start_token)
        x = self.head(x, e.unflatten(0, t.shape).unsqueeze(2))
        return self.unpatchify(x, frames, h, w)

    def compile_blocks(self) -> None:
        """torch.compile of each block's fixed-shape parts (``Block.pre``/``post``); the cache and its attention stay eager."""
        for b in self.blocks:
            b.pre = torch.compile(b.pre, dynamic=False)  # type: ignore[method-assign]
            b.post = torch.compile(b.post, dynamic=False)  # type: ignore[method-assign]
        self.compiled = True

    def uncompile_blocks(self) -> None:
        """Back to eager (a compile that failed while tracing)."""
        for b in self.blocks:
            b.__dict__.pop("pre", None)
            b.__dict__.pop("post", None)
        self.compiled = False

    def unpatchify(self, x: torch.Tensor, frames: int, h: int, w: int) -> torch.Tensor:
        p, c = self.cfg.patch_size, self.cfg.out_dim
        b = x.shape[0]
        u = x.reshape(b, frames, h, w, p[0], p[1], p[2], c)
        u = torch.einsum("bfhwpqrc->bcfphqwr", u)
        return u.reshape(b, c, frames * p[0], h * p[1], w * p[2])

    @torch.no_grad()
    def generate_weights(self, seed: int, progress: Optional[callable] = None) -> None:  # type: ignore[valid-type]
        """Fills every parameter from ``seed`` (no checkpoint): the reference's init scheme, with a
        non-zero head so the output moves (the reference zeroes it for training from scratch)."""
        params = list(self.named_parameters())
        device = params[0][1].device
        # A generator on the parameters' device: a 14B model is drawn on its GPU in seconds (the
        # numbers are the same for a seed on every machine of one device kind).
        gen = torch.Generator(device=device).manual_seed(seed)
        for i, (name, p) in enumerate(params):
            if name.endswith("modulation"):
                vals = torch.randn(p.shape, generator=gen, device=device) / self.cfg.dim**0.5
            elif name.endswith("norm_q.weight") or name.endswith("norm_k.weight") or ".norm3." in name:
                vals = torch.ones(p.shape, device=device) if name.endswith("weight") else torch.zeros(p.shape, device=device)
            elif name.endswith("bias"):
                vals = torch.randn(p.shape, generator=gen, device=device) * 0.01
            else:
                fan_in = p[0].numel()
                fan_out = p.shape[0]
                bound = math.sqrt(6.0 / (fan_in + fan_out))
                vals = (torch.rand(p.shape, generator=gen, device=device) * 2 - 1) * bound
            p.copy_(vals.to(p.dtype))
            if progress is not None:
                progress((i + 1) / len(params))
