"""The PyTorch backend's model alone, without the runner or the server (where the whole path's
time goes, beside ``scripts/gpu/enhance-torch.sh``):

    python3 -m reactor_enhance.bench --package-root DIR [--models thick,medium] [--frames 8,4] \\
        [--width 320 --height 180] [--seconds 3] [--compile off,both]

For each model: milliseconds a frame on the GPU (CUDA events over repeated calls of
``TorchUpscaler.upscale``, uint8 in, uint8 out on the device), the copy back to host memory, and
how far the float16 channels_last output is from float32's on the same device (share of bytes
more than one level apart). With ``--compile`` (modes of ``reactor_worker.compile``, which must be
on the import path), each model once per mode: what ran, the warm-up (compile, capture) time, and
for a compiled mode how far its bytes are from eager's. One JSON object per line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from .esrgan import TorchUpscaler
from .weights import read_model_files


def main() -> None:
    ap = argparse.ArgumentParser(prog="python3 -m reactor_enhance.bench")
    ap.add_argument("--package-root", required=True, help="folder holding @upscalerjs/esrgan-<model> (node_modules)")
    ap.add_argument("--models", default="thick,medium,slim")
    ap.add_argument("--frames", default="8,4,4", help="frames a call, per model")
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--height", type=int, default=180)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--compile", default="off", help="modes of reactor_worker.compile, comma-separated (off,compile,graphs,both,auto)")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    for model, n in zip(a.models.split(","), [int(x) for x in a.frames.split(",")]):
        eager_out = None
        for mode in a.compile.split(","):
            try:
                eager_out = run(a, dev, model, n, mode, eager_out)
            except Exception as e:  # noqa: BLE001 - one mode's failure is a line, the others still run
                print(json.dumps({"bench": "enhance.torch.model", "model": model, "compile": mode, "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()


def run(a: argparse.Namespace, dev: torch.device, model: str, n: int, mode: str, eager_out: np.ndarray | None) -> np.ndarray | None:
    rng = np.random.default_rng(7)  # the same frames for every mode
    files = read_model_files(model, 4, f"{a.package_root}/@upscalerjs/esrgan-{model}")
    up = TorchUpscaler(files, dev)
    fast = up.compile(mode, log=lambda line: print(line, file=sys.stderr, flush=True)) if mode != "off" else None
    # A smooth picture with edges, not noise: gradients plus blocks.
    yy, xx = np.mgrid[0 : a.height, 0 : a.width]
    base = np.stack([(xx * 255 // a.width), (yy * 255 // a.height), ((xx // 16 + yy // 16) % 2) * 200 + 20], -1).astype(np.uint8)
    frames = np.stack([np.roll(base, i * 3, axis=1) for i in range(n)])
    frames = np.clip(frames.astype(np.int16) + rng.integers(-8, 8, frames.shape), 0, 255).astype(np.uint8)
    src = torch.from_numpy(frames)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    tw = time.perf_counter()
    for _ in range(3):
        up.upscale(src)
    sync()
    warm_ms = (time.perf_counter() - tw) * 1000
    calls, t0 = 0, time.perf_counter()
    start = torch.cuda.Event(enable_timing=True) if dev.type == "cuda" else None
    end = torch.cuda.Event(enable_timing=True) if dev.type == "cuda" else None
    if start is not None:
        start.record()
    while time.perf_counter() - t0 < a.seconds:
        out = up.upscale(src)
        calls += 1
    if end is not None:
        end.record()
    sync()
    wall = (time.perf_counter() - t0) * 1000
    gpu = start.elapsed_time(end) if start is not None else wall
    t1 = time.perf_counter()
    host = out.cpu()
    copy_ms = (time.perf_counter() - t1) * 1000
    line = {
        "bench": "enhance.torch.model",
        "model": model,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "dtype": str(up.dtype),
        "weights": files.weight_dtype,
        "framesPerCall": n,
        "input": f"{a.width}x{a.height}",
        "output": f"{a.width * 4}x{a.height * 4}",
        "calls": calls,
        "msPerFrame": round(gpu / calls / n, 3),
        "fps": round(calls * n / (gpu / 1000), 1),
        "copyBackMsPerCall": round(copy_ms, 2),
        "torch": torch.__version__,
        "compile": mode,
        "running": fast.describe() if fast is not None else "eager",
        "warmupMs": round(warm_ms, 1),
    }
    mine = host.numpy()
    if eager_out is not None and mode != "off":
        d = np.abs(mine.astype(np.int16) - eager_out.astype(np.int16))
        line["vsEagerOffByMoreThan1"] = round(float((d > 1).mean()), 6)
        line["vsEagerMax"] = int(d.max())
    if dev.type == "cuda" and mode == "off":
        ref = TorchUpscaler(files, dev, half=False)
        want = ref.upscale(src).cpu().numpy().astype(np.int16)
        d = np.abs(host.numpy().astype(np.int16) - want)
        line["fp16VsFp32OffByMoreThan1"] = round(float((d > 1).mean()), 6)
        line["fp16VsFp32Max"] = int(d.max())
        del ref
    print(json.dumps(line), flush=True)
    del up
    return mine if mode == "off" else eager_out


if __name__ == "__main__":
    main()
