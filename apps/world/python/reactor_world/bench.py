"""The model alone, on one device: chunk time at each fill of the KV cache, and its parts.

    python3 -m reactor_world.bench [--models wan-1.3b,wan-14b] [--chunks 8] [--compile off,on] [--device cuda]

One JSON object per line (``{"bench": "world.model", ...}``): for each model and compile mode, each
chunk's time (the DiT's 4 denoising passes and the cache pass, the decoder, the frames copied to
host memory), the cached latent frames it read, and the peak GPU memory. Generated weights: the
cost is the real model's.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from .configs import config_named
from .decoder import TinyDecoder, to_uint8
from .model import CausalWanModel
from .pipeline import WorldSession
from .text import PromptEncoder


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def generated_model(cfg, dev: torch.device, dtype: torch.dtype) -> tuple[CausalWanModel, TinyDecoder]:
    """The DiT (in ``dtype``) and the decoder of ``cfg`` on ``dev``, weights generated from seeds 0 and 1."""
    if dev.type == "cuda" and hasattr(torch.nn.Module, "to_empty"):
        with torch.device("meta"):
            m = CausalWanModel(cfg)
        m = m.to_empty(device=dev)
    else:
        m = CausalWanModel(cfg).to(dev)
    m = m.to(dtype)
    m.generate_weights(0)
    m.eval().requires_grad_(False)
    d = TinyDecoder(cfg.decoder_channels).to(dev, torch.float16 if dev.type == "cuda" else torch.float32)
    d.generate_weights(1)
    return m, d


def parse_device(name: str) -> torch.device:
    """``--device``: ``cuda`` is the first GPU (an index, which ``torch.cuda.set_device`` needs), else the CPU."""
    return torch.device(name, 0) if name == "cuda" else torch.device("cpu")


def run(name: str, chunks: int, compile_mode: str, dev: torch.device, window: int | None, sink: int | None) -> dict:
    overrides = {"window_frames": window, "sink_frames": sink}
    cfg = config_named(name, **overrides)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    t0 = time.perf_counter()
    m, d = generated_model(cfg, dev, dtype)
    sync(dev)
    build_ms = (time.perf_counter() - t0) * 1000
    compiled = "off"
    if compile_mode == "on":
        m.compile_blocks()
        compiled = "blocks"
    elif compile_mode == "graphs":
        m.compile_blocks("reduce-overhead")
        compiled = "blocks + CUDA graphs (reduce-overhead)"
    s = WorldSession(m, d, PromptEncoder(cfg.text_dim, cfg.text_len, dev, dtype), cfg, dev, dtype)
    rows = []
    for c in range(chunks):
        cached = min(s.frame, cfg.window_frames - cfg.chunk_frames)
        sync(dev)
        t = time.perf_counter()
        out = s.step("a walk through a forest" if c < chunks - 1 else "a city at night", 1, cfg.denoising_steps)
        host = to_uint8(out.frames).cpu()
        sync(dev)
        total = (time.perf_counter() - t) * 1000
        rows.append({"chunk": c, "cachedFrames": cached, "frames": int(host.shape[0]), "totalMs": round(total, 1), **{k: round(v, 1) for k, v in out.timings.items()}, "recached": out.recached})
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
    steady = [r for r in rows[1:] if r["cachedFrames"] == rows[-2]["cachedFrames"] and not r["recached"]]
    ms = sorted(r["totalMs"] for r in steady) if steady else [rows[-1]["totalMs"]]
    med = ms[len(ms) // 2]
    return {
        "bench": "world.model",
        "model": name,
        "params": cfg.parameters(),
        "size": f"{cfg.width}x{cfg.height}",
        "windowFrames": cfg.window_frames,
        "sinkFrames": cfg.sink_frames,
        "compile": compiled,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "buildMs": round(build_ms),
        "steadyChunkMs": med,
        "steadyFps": round(12 * 1000 / med, 1),
        "peakGiB": round(peak / 2**30, 2),
        "cacheGiB": round(s.cache_bytes / 2**30, 3),
        "chunks": rows,
    }


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def soak(name: str, seconds: float, dev: torch.device) -> dict:
    """Chunks for ``seconds`` (a prompt switch every 50): host RSS and device memory sampled every 10 s."""
    cfg = config_named(name)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    m = CausalWanModel(cfg).to(dev, dtype)
    m.generate_weights(0)
    m.eval().requires_grad_(False)
    if dev.type == "cuda" and hasattr(torch, "compile"):
        m.compile_blocks()
    d = TinyDecoder(cfg.decoder_channels).to(dev, torch.float16 if dev.type == "cuda" else torch.float32)
    d.generate_weights(1)
    s = WorldSession(m, d, PromptEncoder(cfg.text_dim, cfg.text_len, dev, dtype), cfg, dev, dtype)
    samples = []
    t0 = time.perf_counter()
    nxt = 0.0
    chunks = 0
    while (el := time.perf_counter() - t0) < seconds:
        out = s.step(f"prompt {chunks // 50}", 3, cfg.denoising_steps)
        to_uint8(out.frames).cpu()
        chunks += 1
        if el >= nxt:
            sync(dev)
            samples.append({"s": round(el), "chunks": chunks, "rssMiB": round(rss_mib(), 1), "devMiB": round(torch.cuda.memory_allocated(dev) / 2**20, 1) if dev.type == "cuda" else None})
            nxt += 10
    # The first sample is taken after one chunk (allocator and caches warm from the second on).
    warm = samples[1] if len(samples) > 1 else samples[0]
    return {
        "bench": "world.soak",
        "model": name,
        "seconds": round(time.perf_counter() - t0),
        "chunks": chunks,
        "frames": s.frame * 4,
        "rssMiBAt10s": warm["rssMiB"],
        "rssMiBEnd": samples[-1]["rssMiB"],
        "rssMiBMax": max(x["rssMiB"] for x in samples[1:] or samples),
        "devMiBAt10s": warm["devMiB"],
        "devMiBEnd": samples[-1]["devMiB"],
        "samples": samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(prog="python3 -m reactor_world.bench")
    ap.add_argument("--models", default="wan-1.3b")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--compile", default="off")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--window", type=int, default=None)
    ap.add_argument("--sink", type=int, default=None)
    ap.add_argument("--soak-seconds", type=float, default=0, help="instead: chunks for this long, memory sampled (world.soak)")
    a = ap.parse_args()
    dev = parse_device(a.device)
    if a.soak_seconds > 0:
        print(json.dumps(soak(a.models.split(",")[0], a.soak_seconds, dev)), flush=True)
        return
    for name in a.models.split(","):
        for mode in a.compile.split(","):
            try:
                row = run(name, a.chunks, mode, dev, a.window, a.sink)
            except Exception as e:  # noqa: BLE001 - one failed variant must not hide the others
                row = {"bench": "world.model", "model": name, "compile": mode, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(json.dumps(row), flush=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
