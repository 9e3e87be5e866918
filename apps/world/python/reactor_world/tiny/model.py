"""The tiny world model: the causal Wan DiT of ``model.py`` at 5 M parameters, on pixels, driven by keys.

What is the big model's and what is added:

- the blocks, the head, RoPE and the rolling KV cache are ``model.py``'s and ``cache.py``'s, as
  they are (``ActionWanModel`` subclasses ``CausalWanModel``);
- no VAE: the "latent" is the 64x64 RGB frame itself in [-1, 1] (``vae_stride`` 1, 3 channels),
  cut into 8x8 patches by the same ``Conv3d`` patch embedding (64 tokens a frame) and put back by
  the same linear head and unpatchify;
- actions: each frame's held keys (6 bits) go through a small MLP and are *added to that frame's
  timestep embedding* ``e`` before the six modulation vectors are made from it (Matrix-Game 2.0's
  keyboard conditioning, in Wan's adaLN), so every block of a frame is modulated by its keys;
- no text: the cross-attention reads one constant token (the text embedding of zeros), kept so
  the block is Wan's block unchanged;
- the window is 4 chunks (12 frames) with no sink: a chunk attends to the 3 chunks before it, and
  training masks attention the same way (:func:`train_mask`), so a session of any length stays in
  the positions training saw (RoPE is relative).

``forward`` is the cached inference pass (one chunk, as ``CausalWanModel.forward``);
``forward_train`` runs a whole clip teacher-forced, clean frames and noisy frames side by side
with the block-causal mask, so one pass trains every chunk of it (CausVid's teacher forcing);
``test_tiny_world.py`` checks the two give the same numbers.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..attention import HAS_SDPA
from ..checkpoint import CheckpointError
from ..cache import BlockCache
from ..configs import ModelConfig
from ..model import Block, CausalWanModel, rope_factors, sinusoidal_embedding
from .render import ACTION_KEYS, SIZE

__all__ = ["TINY_WORLD", "ActionWanModel", "train_mask", "check_weights"]

#: The tiny-world config: 64x64 RGB, 8x8 patches (64 tokens a frame), 6 blocks of width 256.
TINY_WORLD = ModelConfig(
    name="tiny-world",
    dim=256,
    ffn_dim=768,
    num_heads=4,
    num_layers=6,
    in_dim=3,
    out_dim=3,
    freq_dim=128,
    text_dim=8,
    text_len=1,
    patch_size=(1, 8, 8),
    height=SIZE,
    width=SIZE,
    chunk_frames=3,
    window_frames=12,
    sink_frames=0,
    denoising_steps=(1000, 750, 500, 250),
    timestep_shift=1.0,
    context_noise=0,
    vae_stride=1,
    decoder_channels=(0, 0, 0, 0),
    extra={"actions": len(ACTION_KEYS)},
).check()


def train_mask(chunks: int, chunk_frames: int, frame_tokens: int, window_chunks: int, device: torch.device) -> torch.Tensor:
    """``[2L, 2L]`` bool (True: may attend) over ``[clean tokens; noisy tokens]`` of ``chunks`` chunks.

    Clean chunk ``c`` reads clean chunks ``c - window_chunks + 1 .. c``; noisy chunk ``c`` reads
    clean chunks ``c - window_chunks + 1 .. c - 1`` and itself: what the rolling cache holds when
    inference writes chunk ``c`` (``cache.py``: the denoising passes, then the clean pass).
    """
    per = chunk_frames * frame_tokens
    c = torch.arange(chunks, device=device).repeat_interleave(per)
    qc, kc = c[:, None], c[None, :]
    in_window = (kc > qc - window_chunks) & (kc <= qc)
    clean_clean = in_window
    noisy_clean = in_window & (kc < qc)
    noisy_noisy = kc == qc
    top = torch.cat([clean_clean, torch.zeros_like(clean_clean)], dim=1)
    bottom = torch.cat([noisy_clean, noisy_noisy], dim=1)
    return torch.cat([top, bottom], dim=0)


def _masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if HAS_SDPA:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        out = torch.matmul(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1), v)
    return out.transpose(1, 2).contiguous()


def _block_train(block: Block, x: torch.Tensor, e: torch.Tensor, rope: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``Block.forward`` with the whole clip's keys and a mask in place of the cache: the block's
    own ``pre`` (modulation, q/k/v, RoPE) and ``post`` (output, cross-attention, FFN) around it."""
    q, k, v, me = block.pre(x, e, rope)
    y = _masked_attention(q, k.type_as(v), v, mask)
    ck, cv = block.cross_attn.kv(context, None)
    return block.post(x, y, me, ck, cv)


class ActionWanModel(CausalWanModel):
    """``CausalWanModel`` with a per-frame action embedding added to the timestep embedding."""

    def __init__(self, cfg: ModelConfig = TINY_WORLD) -> None:
        super().__init__(cfg)
        n = int(cfg.extra.get("actions", len(ACTION_KEYS)))
        self.num_actions = n
        self.action_embedding = nn.Sequential(nn.Linear(n, cfg.dim), nn.SiLU(), nn.Linear(cfg.dim, cfg.dim))

    @torch.no_grad()
    def init_for_training(self, seed: int) -> None:
        """PyTorch's default init from ``seed``, the head zeroed (DiT's training init: the first flow is 0)."""
        torch.manual_seed(seed)
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Conv3d)):
                mod.reset_parameters()
        for blk in self.blocks:
            blk.modulation.normal_(0, self.cfg.dim**-0.5)
        self.head.modulation.normal_(0, self.cfg.dim**-0.5)
        nn.init.zeros_(self.head.head.weight)
        nn.init.zeros_(self.head.head.bias)

    def _context(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        return self.embed_text(like.new_zeros(batch, 1, self.cfg.text_dim))

    def _embed(self, t: torch.Tensor, actions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``t`` ``[B, F]``, ``actions`` ``[B, F, A]`` -> the head's ``e`` ``[B, F, 1, C]`` and the blocks' ``e0`` ``[B, F, 6, C]``."""
        cfg = self.cfg
        e = self.time_embedding(sinusoidal_embedding(cfg.freq_dim, t.flatten()).type_as(like))
        e = e + self.action_embedding(actions.flatten(0, 1).type_as(like))
        e0 = self.time_projection(e).unflatten(1, (6, cfg.dim)).unflatten(0, t.shape)
        return e.unflatten(0, t.shape).unsqueeze(2), e0

    def forward(self, x: torch.Tensor, t: torch.Tensor, actions: torch.Tensor, caches: list[BlockCache], start_frame: int) -> torch.Tensor:  # type: ignore[override]
        """The flow of one chunk: ``x`` ``[B, C, F, H, W]`` at timesteps ``t`` ``[B, F]`` under ``actions``
        ``[B, F, A]``, reading and writing ``caches`` at ``start_frame``. Returns ``[B, C, F, H, W]``."""
        x = self.patch_embedding(x)
        frames, h, w = x.shape[2], x.shape[3], x.shape[4]
        x = x.flatten(2).transpose(1, 2)
        e, e0 = self._embed(t, actions, x)
        rope = rope_factors(self.cfg.head_dim, frames, h, w, start_frame, x.device)
        context = self._context(x.shape[0], x)
        for i, block in enumerate(self.blocks):
            x = block(x, e0, rope, context, caches[i], None, start_frame * h * w)
        return self.unpatchify(self.head(x, e), frames, h, w)

    def forward_train(self, noisy: torch.Tensor, t_noisy: torch.Tensor, clean: torch.Tensor, t_clean: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """A teacher-forced clip: ``noisy``/``clean`` ``[B, C, T, H, W]`` at ``t_noisy``/``t_clean``
        ``[B, T]``; ``mask`` from :func:`train_mask`. Returns the noisy frames' flow ``[B, C, T, H, W]``."""
        frames = noisy.shape[2]
        x = self.patch_embedding(torch.cat([clean, noisy], dim=2))
        h, w = x.shape[3], x.shape[4]
        x = x.flatten(2).transpose(1, 2)
        e, e0 = self._embed(torch.cat([t_clean, t_noisy], dim=1), torch.cat([actions, actions], dim=1), x)
        r = rope_factors(self.cfg.head_dim, frames, h, w, 0, x.device)
        rope = torch.cat([r, r], dim=-3)  # the tokens' axis (``[L, 1, c]`` complex or ``[2, L, 1, c]`` real/imaginary)
        context = self._context(x.shape[0], x)
        for block in self.blocks:
            x = _block_train(block, x, e0, rope, context, mask)
        out = self.unpatchify(self.head(x, e), 2 * frames, h, w)
        return out[:, :, frames:]

    def extra_repr(self) -> str:
        return f"actions={self.num_actions} ({', '.join(ACTION_KEYS)})"


def build(cfg: ModelConfig = TINY_WORLD, device: Optional[torch.device] = None) -> ActionWanModel:
    m = ActionWanModel(cfg)
    return m.to(device) if device is not None else m


def check_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], where: str) -> None:
    """Raises ``CheckpointError`` (``world_checkpoint_invalid``) for a missing, unknown or misshapen key, naming it."""
    missing = [k for k in want if k not in got]
    unknown = [k for k in got if k not in want]
    if missing and len(missing) == len(want):
        raise CheckpointError(f"{where}: none of the {len(want)} keys of the tiny-world model is in it (it has e.g. {', '.join(list(got)[:3])}); is it a tiny-world weights file?")
    if missing:
        raise CheckpointError(f"{where}: missing key {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "") + " of the tiny-world model; the weights are of another config")
    for k, v in want.items():
        if tuple(got[k].shape) != tuple(v.shape):
            raise CheckpointError(f"{where}: key {k!r} has shape {list(got[k].shape)}, the tiny-world config needs {list(v.shape)}; the weights are of another config (retrain with apps/world/train/train.py)")
    if unknown:
        raise CheckpointError(f"{where}: unexpected key {unknown[0]!r}" + (f" and {len(unknown) - 1} more" if len(unknown) > 1 else "") + ", which the tiny-world model does not have")
