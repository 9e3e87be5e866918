"""A played session as training data: a recording of the tiny world to a training file (format 1).

A tiny-world server records with ``recording.frame_metadata: true`` (``tiny-world.yaml`` sets
it): beside ``<name>.mp4`` it writes ``<name>.frames.jsonl``, one line per frame of the file in
the file's order, ``{"t": seconds, "seq": n, "metadata": {"chunk": c, "keys": [...], ...}}``.
This module decodes the file with ``ffmpeg`` (H.264 at the viewer's size: the frames come back
scaled to 64x64 by area, so they are the model's frames after one lossy encode), pairs frame
``i`` with line ``i`` (a recording cut short by a crash has fewer frames than lines: the prefix is
used), and cuts the session into sequences of ``seq_frames`` frames that start on a chunk and run
over consecutive frame numbers. Each frame's action is the keys its chunk was made under, which is
what the renderer's files say too (frame ``t`` shows the world after action ``t``).

    python3 -m reactor_world.tiny.recording recordings/<name>.mp4 --out played.npz
    python3 apps/world/train/train.py --data played.npz --init weights/tiny-world.safetensors ...

Anything it cannot use is refused with a ``TrainingDataError`` (``world_training_data_invalid``)
that says what and how to fix it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Optional

import numpy as np

from .data import CHUNK, TrainingDataError, write_training_file
from .render import ACTION_KEYS, SIZE

__all__ = ["read_recording", "frames_file_of"]


def frames_file_of(mp4: str) -> str:
    return mp4[: -len(".mp4")] + ".frames.jsonl" if mp4.endswith(".mp4") else mp4 + ".frames.jsonl"


def _lines(path: str, mp4: str) -> list[dict]:
    if not os.path.exists(path):
        raise TrainingDataError(
            f"{mp4} has no {os.path.basename(path)} beside it: record with `recording: {{frame_metadata: true}}` in reactor.yaml "
            "(apps/world/tiny-world.yaml has it), or pass --frames"
        )
    out = []
    with open(path, encoding="utf8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.endswith("\n"):
                break  # a line cut by a crash: the rest is not the file's
            try:
                line = json.loads(raw)
            except ValueError as e:
                raise TrainingDataError(f"{path} line {n} is not JSON ({e})") from None
            keys = (line.get("metadata") or {}).get("keys")
            if not isinstance(keys, list) or any(k not in ACTION_KEYS for k in keys):
                raise TrainingDataError(f"{path} line {n} has no tiny-world keys in its metadata ({json.dumps(line)[:200]}); is this a tiny-world recording?")
            out.append(line)
    return out


def _decode(mp4: str) -> np.ndarray:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise TrainingDataError("decoding a recording needs ffmpeg on the PATH (Debian: apt-get install ffmpeg)")
    cmd = [ffmpeg, "-v", "error", "-i", mp4, "-map", "0:v:0", "-fps_mode", "passthrough", "-vf", f"scale={SIZE}:{SIZE}:flags=area", "-pix_fmt", "rgb24", "-f", "rawvideo", "-"]
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        raise TrainingDataError(f"ffmpeg could not decode {mp4}: {r.stderr.decode(errors='replace').strip()[-400:]}")
    frame = SIZE * SIZE * 3
    n = len(r.stdout) // frame
    return np.frombuffer(r.stdout[: n * frame], np.uint8).reshape(n, SIZE, SIZE, 3)


def read_recording(mp4: str, frames_path: Optional[str] = None, seq_frames: int = 18) -> tuple[np.ndarray, np.ndarray]:
    """``(frames [N, T, 64, 64, 3], actions [N, T, 6])`` of one recording, ``T = seq_frames``."""
    if seq_frames < CHUNK or seq_frames % CHUNK:
        raise TrainingDataError(f"--seq-frames {seq_frames} is not a whole number of {CHUNK}-frame chunks")
    if not os.path.exists(mp4):
        raise TrainingDataError(f"recording {mp4} does not exist (GET /recordings lists a server's recordings)")
    lines = _lines(frames_path or frames_file_of(mp4), mp4)
    pixels = _decode(mp4)
    n = min(len(lines), len(pixels))
    frames, actions = [], []
    i = 0
    while i + seq_frames <= n:
        run = lines[i : i + seq_frames]
        seqs = [ln.get("seq") for ln in run]
        chunks = [ln["metadata"].get("chunk") for ln in run]
        first_of_chunk = i == 0 or lines[i - 1]["metadata"].get("chunk") != chunks[0]
        consecutive = all(isinstance(s, int) for s in seqs) and all(b == a + 1 for a, b in zip(seqs, seqs[1:]))
        if not (first_of_chunk and consecutive):
            i += 1
            continue
        acts = np.zeros((seq_frames, len(ACTION_KEYS)), np.uint8)
        for t, ln in enumerate(run):
            for k in ln["metadata"]["keys"]:
                acts[t, ACTION_KEYS.index(k)] = 1
        frames.append(pixels[i : i + seq_frames])
        actions.append(acts)
        i += seq_frames
    if not frames:
        raise TrainingDataError(
            f"{mp4} has {n} usable frames: no run of {seq_frames} consecutive frames that starts on a chunk; record longer or lower --seq-frames"
        )
    return np.stack(frames), np.stack(actions)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m reactor_world.tiny.recording", description="A tiny-world recording (.mp4 + .frames.jsonl) to a training file.")
    ap.add_argument("recordings", nargs="+", help="<name>.mp4 files, each with its .frames.jsonl beside it")
    ap.add_argument("--out", required=True, help="the training file (.npz) to write")
    ap.add_argument("--seq-frames", type=int, default=18, help="frames a sequence (a whole number of 3-frame chunks; train.py's --frames)")
    args = ap.parse_args(argv)
    try:
        parts = [read_recording(p, seq_frames=args.seq_frames) for p in args.recordings]
    except TrainingDataError as e:
        print(f"{type(e).__name__} [{e.code}]: {e}", file=sys.stderr)
        return 2
    frames = np.concatenate([p[0] for p in parts])
    actions = np.concatenate([p[1] for p in parts])
    write_training_file(args.out, frames, actions, source="recording")
    held = actions.any(axis=2).mean()
    print(f"{args.out}: {frames.shape[0]} sequences of {frames.shape[1]} frames from {len(parts)} recording(s); keys held in {held:.0%} of frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
