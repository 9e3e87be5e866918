"""Upscales raw RGB frames with the PyTorch backend, outside any runner (tests, checks by hand):

    python3 -m reactor_enhance --model slim --scale 4 --package-dir DIR --n 2 --width 32 --height 20 \\
        [--checksums checksums.json] [--device cpu|cuda] [--band y0,y1,in0,in1] < in.rgb > out.rgb

Reads ``n·height·width·3`` bytes on stdin, writes the upscaled bytes on stdout and one JSON line
about the model on stderr. Exit status 2 for bad arguments, 3 for a missing or corrupt model.
"""

from __future__ import annotations

import argparse
import json
import sys

from .weights import MODEL_NAMES, EnhanceError, read_model_files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m reactor_enhance", description="ESRGAN upscaling on PyTorch")
    ap.add_argument("--model", choices=MODEL_NAMES, required=True)
    ap.add_argument("--scale", type=int, default=4)
    ap.add_argument("--package-dir", required=True, help="the @upscalerjs/esrgan-<model> package folder")
    ap.add_argument("--checksums", help="JSON file of published SHA-256s (<model>/x<scale>/<file>: hash)")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--band", help="y0,y1,in0,in1: output rows [y0, y1) read from input rows [in0, in1)")
    a = ap.parse_args(argv)
    import torch

    from .esrgan import TorchUpscaler

    table = None
    if a.checksums:
        with open(a.checksums, encoding="utf-8") as f:
            table = json.load(f)
    try:
        files = read_model_files(a.model, a.scale, a.package_dir, table)
        up = TorchUpscaler(files, a.device)
    except EnhanceError as e:
        print(json.dumps({"error": type(e).__name__, "code": e.code, "message": str(e)}), file=sys.stderr)
        return 3
    need = a.n * a.height * a.width * 3
    data = sys.stdin.buffer.read()
    if len(data) != need:
        print(f"reactor_enhance: {a.n} frames of {a.width}x{a.height} need {need} bytes on stdin, got {len(data)}", file=sys.stderr)
        return 2
    frames = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(a.n, a.height, a.width, 3)
    band = tuple(int(v) for v in a.band.split(",")) if a.band else None
    out = up.upscale(frames, band).cpu().numpy()  # type: ignore[arg-type]
    sys.stdout.buffer.write(out.tobytes())
    print(json.dumps({"model": a.model, "scale": a.scale, "sha256": files.sha256, "radius": files.radius, "dtype": str(up.dtype), "weights": files.weight_dtype}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
