"""The text side: what conditions the DiT's cross-attention.

The reference encodes a prompt with umT5-XXL (``models_t5_umt5-xxl-enc-bf16.pth``, 4096-wide, up
to 512 tokens). Those weights cannot be downloaded here, so by default a prompt becomes a
*cached prompt embedding of the right shape*: one vector per word, drawn from a generator seeded
by the word's SHA-256 (the same words give the same vectors on every machine; a prompt change
changes the conditioning). It conditions the model the way T5's output does, and means nothing.

A real encoder plugs in through the config's ``text_encoder: "module:callable"``: the callable
gets ``(prompt, device, dtype)`` and returns ``[tokens, text_dim]`` (see docs/world-model.md for
Wan's T5 in ten lines). Embeddings are cached per prompt (a prompt switch back costs nothing).
"""

from __future__ import annotations

import hashlib
import importlib
from collections import OrderedDict
from typing import Callable

import torch

__all__ = ["PromptEncoder", "hashed_embedding", "load_encoder", "TextEncoderError"]


class TextEncoderError(RuntimeError):
    """The configured ``text_encoder`` cannot be imported or returned a bad shape (code ``world_text_encoder``)."""

    code = "world_text_encoder"


def hashed_embedding(prompt: str, text_dim: int, text_len: int) -> torch.Tensor:
    """``[min(words, text_len), text_dim]`` float32: a vector per word, seeded by the word's SHA-256."""
    words = prompt.split() or [""]
    rows = []
    for word in words[:text_len]:
        seed = int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "little") & ((1 << 63) - 1)
        rows.append(torch.randn(text_dim, generator=torch.Generator().manual_seed(seed)) * 0.1)
    return torch.stack(rows)


def load_encoder(spec: str) -> Callable[[str, torch.device, torch.dtype], torch.Tensor]:
    """Imports ``module:callable``; a typo names what was tried."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise TextEncoderError(f"text_encoder {spec!r} must be 'module:callable' (e.g. 'my_t5:encode')")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise TextEncoderError(f"text_encoder {spec!r} cannot be loaded: {e}; put its folder on the app's python path") from e
    return fn


class PromptEncoder:
    """Prompt -> ``[1, tokens, text_dim]`` on the model's device, cached (LRU of 64 prompts)."""

    def __init__(self, text_dim: int, text_len: int, device: torch.device, dtype: torch.dtype, spec: str | None = None) -> None:
        self.text_dim, self.text_len, self.device, self.dtype = text_dim, text_len, device, dtype
        self.custom = load_encoder(spec) if spec else None
        self.kind = spec or "hashed words (no text encoder weights)"
        self.cache: OrderedDict[str, torch.Tensor] = OrderedDict()

    def __call__(self, prompt: str) -> torch.Tensor:
        got = self.cache.get(prompt)
        if got is not None:
            self.cache.move_to_end(prompt)
            return got
        if self.custom is not None:
            emb = torch.as_tensor(self.custom(prompt, self.device, self.dtype))
            if emb.dim() != 2 or emb.shape[1] != self.text_dim or emb.shape[0] < 1:
                raise TextEncoderError(f"text_encoder {self.kind} returned shape {tuple(emb.shape)}; the model needs [tokens, {self.text_dim}]")
            emb = emb[: self.text_len]
        else:
            emb = hashed_embedding(prompt, self.text_dim, self.text_len)
        out = emb.to(device=self.device, dtype=self.dtype).unsqueeze(0)
        self.cache[prompt] = out
        if len(self.cache) > 64:
            self.cache.popitem(last=False)
        return out
