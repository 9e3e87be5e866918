"""Shared test helpers: the small config's pieces, built as the worker builds them (CPU, float32)."""

from __future__ import annotations

import json
import os

import torch

from reactor_world.checkpoint import read_safetensors
from reactor_world.configs import config_named
from reactor_world.decoder import TinyDecoder
from reactor_world.model import CausalWanModel
from reactor_world.pipeline import WorldSession
from reactor_world.text import PromptEncoder

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "test", "golden")
CPU = torch.device("cpu")


def golden() -> tuple[dict[str, torch.Tensor], dict]:
    with open(os.path.join(GOLDEN, "small.json")) as f:
        meta = json.load(f)
    return read_safetensors(os.path.join(GOLDEN, "small.safetensors")), meta


def session(cfg=None, seed: int = 0, weights: dict[str, torch.Tensor] | None = None) -> WorldSession:
    cfg = cfg or config_named("small")
    m = CausalWanModel(cfg)
    if weights is not None:
        m.load_state_dict(weights)
    else:
        m.generate_weights(seed)
    m.eval().requires_grad_(False)
    d = TinyDecoder(cfg.decoder_channels)
    d.generate_weights(seed + 1)
    return WorldSession(m, d, PromptEncoder(cfg.text_dim, cfg.text_len, CPU, torch.float32), cfg, CPU, torch.float32)


def close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> tuple[bool, float]:
    diff = (a.double() - b.double()).abs()
    return bool((diff <= atol + rtol * b.double().abs()).all()), float(diff.max())
