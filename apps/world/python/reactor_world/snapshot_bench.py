"""A session snapshot of the world model, timed: the KV cache to host memory and back.

    python3 -m reactor_world.snapshot_bench [--models small] [--chunks 6] [--device cpu|cuda] [--window N]

For each model: ``chunks`` chunks fill the KV cache; then ``session_state()`` (every tensor to
host memory: the part of the snapshot the session's size decides), its bytes, and
``load_session_state()`` (back onto the device). Fidelity: the chunk made after a restore is
compared with the chunk first made from that state (latent hash: bit-exact on one device kind).
One JSON object per line (``{"bench": "world.snapshot", ...}``). Generated weights: the sizes
and times are the real model's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from typing import Any

import numpy as np
import torch

from .configs import config_named
from .bench import generated_model, parse_device, sync
from .pipeline import WorldSession
from .snapshot import load_session_state, session_state
from .text import PromptEncoder


def _bytes(v: Any) -> int:
    if isinstance(v, torch.Tensor):
        return v.numel() * v.element_size()
    if isinstance(v, np.ndarray):
        return int(v.nbytes)
    if isinstance(v, dict):
        return sum(_bytes(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return sum(_bytes(x) for x in v)
    return 0


def _session(name: str, dev: torch.device, window: int | None) -> WorldSession:
    cfg = config_named(name, **({"window_frames": window} if window else {}))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    m, d = generated_model(cfg, dev, dtype)
    return WorldSession(m, d, PromptEncoder(cfg.text_dim, cfg.text_len, dev, dtype), cfg, dev, dtype)


def _hash(out: Any) -> str:
    return hashlib.sha256(out.latents.float().cpu().numpy().tobytes()).hexdigest()[:16]


def run(name: str, chunks: int, dev: torch.device, window: int | None, repeats: int = 3) -> dict:
    s = _session(name, dev, window)
    cfg = s.cfg
    steps = cfg.denoising_steps
    for c in range(chunks):
        s.step("a walk through a forest", 1, steps)
    snap_ms, restore_ms = [], []
    snap: dict = {}
    for _ in range(repeats):
        sync(dev)
        t = time.perf_counter()
        snap = session_state(s)
        sync(dev)
        snap_ms.append((time.perf_counter() - t) * 1000)
    expected = _hash(s.step("a walk through a forest", 1, steps))
    for _ in range(repeats):
        sync(dev)
        t = time.perf_counter()
        load_session_state(s, snap)
        sync(dev)
        restore_ms.append((time.perf_counter() - t) * 1000)
    again = _hash(s.step("a walk through a forest", 1, steps))
    return {
        "bench": "world.snapshot",
        "model": name,
        "size": f"{cfg.width}x{cfg.height}",
        "windowFrames": cfg.window_frames,
        "chunksBefore": chunks,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cacheBytes": s.cache_bytes,
        "snapshotBytes": _bytes(snap),
        "snapshotMs": round(sorted(snap_ms)[len(snap_ms) // 2], 2),
        "restoreMs": round(sorted(restore_ms)[len(restore_ms) // 2], 2),
        "repeats": repeats,
        "bitExact": expected == again,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="small")
    p.add_argument("--chunks", type=int, default=6)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    dev = parse_device(a.device)
    for name in a.models.split(","):
        try:
            print(json.dumps(run(name, a.chunks, dev, a.window, a.repeats)), flush=True)
        except Exception as e:  # noqa: BLE001 - one model's failure is a line, the others still run
            print(json.dumps({"bench": "world.snapshot", "model": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}), flush=True)
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
