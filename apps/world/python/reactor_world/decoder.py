"""A tiny latent decoder in TAEHV's architecture (``taew2_1.pth`` is its Wan2.1 checkpoint), streamed.

The decoder turns ``[T, 16, h, w]`` latents into ``[4T, 3, 8h, 8w]`` frames: a clamp, convs and
``MemBlock`` residual blocks that each read their input *and the previous frame's input*, nearest
2x upsamplings, and two ``TGrow`` layers that make two frames of each. Self-Forcing's demo decodes
with it (its ``demo_utils/taehv.py``); the layer indices here are that ``decoder`` Sequential's, so
its checkpoint's ``decoder.*`` keys load as they are.

Streaming: each MemBlock keeps the last frame it saw, so chunk after chunk gives the frames a
decode of the whole video at once would (``test_decoder`` compares the two). The first
``2**2 - 1 = 3`` frames of a session are the warm-up of the temporal upsampling and are dropped:
a first chunk of 3 latent frames gives 9 frames, every later one 12, as Wan's VAE does.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

__all__ = ["TinyDecoder", "DecoderState"]


def _conv(n_in: int, n_out: int, bias: bool = True) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, padding=1, bias=bias)


class Clamp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / 3) * 3


class MemBlock(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(_conv(n_in * 2, n_out), nn.ReLU(inplace=True), _conv(n_out, n_out), nn.ReLU(inplace=True), _conv(n_out, n_out))
        self.skip = nn.Conv2d(n_in, n_out, 1, bias=False) if n_in != n_out else nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(torch.cat([x, past], 1)) + self.skip(x))


class TGrow(nn.Module):
    def __init__(self, n_f: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(n_f, n_f * stride, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        return self.conv(x).reshape(-1, c, x.shape[2], x.shape[3])


class DecoderState:
    """What the decoder carries from one chunk to the next: each MemBlock's last input frame."""

    def __init__(self) -> None:
        self.last: dict[int, torch.Tensor] = {}
        self.frames_out = 0

    def clear(self) -> None:
        self.last.clear()
        self.frames_out = 0


class TinyDecoder(nn.Module):
    latent_channels = 16
    trim = 3  # 2 ** (two temporal upsamplings) - 1

    def __init__(self, channels: tuple[int, int, int, int] = (256, 128, 64, 64)) -> None:
        super().__init__()
        n = channels
        self.decoder = nn.Sequential(
            Clamp(), _conv(self.latent_channels, n[0]), nn.ReLU(inplace=True),
            MemBlock(n[0], n[0]), MemBlock(n[0], n[0]), MemBlock(n[0], n[0]), nn.Upsample(scale_factor=2), TGrow(n[0], 1), _conv(n[0], n[1], bias=False),
            MemBlock(n[1], n[1]), MemBlock(n[1], n[1]), MemBlock(n[1], n[1]), nn.Upsample(scale_factor=2), TGrow(n[1], 2), _conv(n[1], n[2], bias=False),
            MemBlock(n[2], n[2]), MemBlock(n[2], n[2]), MemBlock(n[2], n[2]), nn.Upsample(scale_factor=2), TGrow(n[2], 2), _conv(n[2], n[3], bias=False),
            nn.ReLU(inplace=True), _conv(n[3], 3),
        )  # fmt: skip

    def decode(self, latents: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """``[T, 16, h, w]`` latents (one chunk) -> ``[frames, 3, 8h, 8w]`` in ~[0, 1], streamed through ``state``."""
        x = latents
        for i, layer in enumerate(self.decoder):
            if isinstance(layer, MemBlock):
                prev = state.last.get(i)
                first = prev if prev is not None else torch.zeros_like(x[:1])
                past = torch.cat([first, x[:-1]], dim=0)
                state.last[i] = x[-1:].clone()
                x = layer(x, past)
            else:
                x = layer(x)
        if state.frames_out == 0:
            x = x[self.trim :]
        state.frames_out += x.shape[0]
        return x

    @torch.no_grad()
    def generate_weights(self, seed: int) -> None:
        """Seeded weights for when no decoder checkpoint is given (the picture is then noise too)."""
        params = list(self.parameters())
        gen = torch.Generator(device=params[0].device).manual_seed(seed)
        for p in params:
            fan_in = p[0].numel() if p.dim() > 1 else p.numel()
            p.copy_((torch.randn(p.shape, generator=gen, device=p.device) * (1.0 / fan_in) ** 0.5).to(p.dtype))

    def load_taehv(self, state_dict: dict[str, torch.Tensor], where: str) -> None:
        """Loads a TAEHV checkpoint's ``decoder.*`` keys (its encoder is not needed), checked key by key."""
        from .checkpoint import check_state_dict

        own = {k: v for k, v in self.state_dict().items()}
        sub = {k: v for k, v in state_dict.items() if k.startswith("decoder.")}
        for i, layer in enumerate(self.decoder):
            key = f"decoder.{i}.conv.weight"
            if isinstance(layer, TGrow) and key in sub and sub[key].shape[0] > own[key].shape[0]:
                sub[key] = sub[key][-own[key].shape[0] :]  # TAEHV's own patch for a smaller time stride
        check_state_dict(sub, own, where, "TAEHV decoder")
        self.load_state_dict(sub)


def to_uint8(frames: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[N, 3, H, W]`` in [0, 1] -> ``[N, H, W, 3]`` uint8 (on the frames' device)."""
    u8 = frames.clamp(0, 1).mul(255).round().to(torch.uint8).permute(0, 2, 3, 1)
    if out is not None:
        out.copy_(u8)
        return out
    return u8.contiguous()
