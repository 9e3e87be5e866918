"""How good the tiny world is, against the renderer's ground truth.

- **drift**: for seeded action sequences, the session starts from the renderer's first chunk and
  generates the next chunks under the true actions; PSNR and SSIM of each generated chunk against
  the frames the renderer draws for the same actions, after 1, 4 and 16 chunks. Beside them the
  same figures for "the last true frame held still" (what a model that ignores everything would
  score), so the numbers have a floor to read against;
- **actions**: from each start, one chunk with turn-left held and one with turn-right held: the
  horizontal shift of the first generated frame against the last context frame, and the view's
  travel over the whole chunk (frame-to-frame shifts summed), against the renderer's (turning
  left moves the picture right); and whether each generated chunk is closer (PSNR) to the true
  chunk of its own key than to the other key's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .render import ACTION_KEYS, World, random_actions, random_pose, rollout
from .session import TinySession

__all__ = ["psnr", "ssim", "horizontal_shift", "chunk_shift", "evaluate_drift", "evaluate_actions"]


def psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-image PSNR (dB) of uint8 ``[N, H, W, 3]`` arrays."""
    mse = ((a.astype(np.float64) - b.astype(np.float64)) ** 2).reshape(a.shape[0], -1).mean(1)
    return 10 * np.log10(255.0**2 / np.maximum(mse, 1e-10))


def ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-image SSIM of uint8 ``[N, H, W, 3]`` (11x11 Gaussian window, sigma 1.5, per channel, averaged)."""
    x = torch.from_numpy(a).permute(0, 3, 1, 2).double()
    y = torch.from_numpy(b).permute(0, 3, 1, 2).double()
    g = torch.exp(-((torch.arange(11, dtype=torch.float64) - 5) ** 2) / (2 * 1.5**2))
    g = g / g.sum()
    win = (g[:, None] * g[None, :]).expand(3, 1, 11, 11).contiguous()

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, win, groups=3)

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx**2, blur(y * y) - my**2, blur(x * y) - mx * my
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    return s.flatten(1).mean(1).numpy()


def horizontal_shift(a: np.ndarray, b: np.ndarray, max_shift: int = 16) -> int:
    """The whole-pixel shift ``s`` that best explains ``b[:, x] = a[:, x - s]`` (grey, upper half: walls)."""
    ga, gb = a.astype(np.float64).mean(2), b.astype(np.float64).mean(2)
    w = ga.shape[1]
    best, arg = None, 0
    for s in range(-max_shift, max_shift + 1):
        d = gb[:, s:] - ga[:, : w - s] if s >= 0 else gb[:, : w + s] - ga[:, -s:]
        e = float((d**2).mean())
        if best is None or e < best:
            best, arg = e, s
    return arg


def chunk_shift(last: np.ndarray, chunk: np.ndarray) -> int:
    """The view's horizontal travel over a chunk: the shifts frame to frame from ``last`` (the frame before it), summed."""
    prev, total = last, 0
    for f in chunk:
        total += horizontal_shift(prev, f)
        prev = f
    return total


def _chunks(x: np.ndarray, f: int) -> np.ndarray:
    n, t = x.shape[0], x.shape[1]
    return x.reshape(n, t // f, f, *x.shape[2:])


def evaluate_drift(model: torch.nn.Module, cfg: Any, device: torch.device, dtype: torch.dtype, sequences: int = 20, chunks: int = 16, seed: int = 2026, at: tuple[int, ...] = (1, 4, 16)) -> dict[str, Any]:
    """PSNR/SSIM after each of ``at`` generated chunks, over ``sequences`` seeded action sequences."""
    world = World()
    rng = np.random.default_rng(seed)
    f = cfg.chunk_frames
    pose = random_pose(world, rng, sequences)
    actions = random_actions(rng, sequences, (chunks + 1) * f)
    truth, _ = rollout(world, pose, actions)
    tc, ac = _chunks(truth, f), _chunks(actions, f)
    s = TinySession(model, cfg, device, dtype, batch=sequences)
    s.start(torch.from_numpy(tc[:, 0]), torch.from_numpy(ac[:, 0]))
    rows: dict[str, Any] = {}
    held = tc[:, 0, -1]
    for c in range(1, chunks + 1):
        gen = s.step(torch.from_numpy(ac[:, c]), seed=seed).cpu().numpy()
        if c in at:
            g, t = gen.reshape(-1, *gen.shape[2:]), tc[:, c].reshape(-1, *gen.shape[2:])
            still = np.repeat(held[:, None], f, axis=1).reshape(t.shape)
            rows[str(c)] = {
                "psnr": float(psnr(g, t).mean()),
                "ssim": float(ssim(g, t).mean()),
                "still_psnr": float(psnr(still, t).mean()),
                "still_ssim": float(ssim(still, t).mean()),
            }
    return {"sequences": sequences, "seed": seed, "after_chunks": rows}


def evaluate_actions(model: torch.nn.Module, cfg: Any, device: torch.device, dtype: torch.dtype, sequences: int = 20, seed: int = 4040) -> dict[str, Any]:
    """Turn-left vs turn-right from the same starts: shift signs and which truth each is closer to."""
    world = World()
    rng = np.random.default_rng(seed)
    f = cfg.chunk_frames
    pose = random_pose(world, rng, sequences)
    still = np.zeros((sequences, f, len(ACTION_KEYS)), np.uint8)
    ctx, ctx_pose = rollout(world, pose, still)
    out: dict[str, Any] = {"sequences": sequences, "seed": seed}
    gens = {}
    truths = {}
    for key in ("turn_left", "turn_right"):
        a = np.zeros_like(still)
        a[:, :, ACTION_KEYS.index(key)] = 1
        truth, _ = rollout(world, ctx_pose[:, -1], a)
        s = TinySession(model, cfg, device, dtype, batch=sequences)
        s.start(torch.from_numpy(ctx), torch.from_numpy(still))
        gen = s.step(torch.from_numpy(a), seed=seed).cpu().numpy()
        gens[key], truths[key] = gen, truth
        gs = [horizontal_shift(ctx[i, -1], gen[i, 0]) for i in range(sequences)]
        ts = [horizontal_shift(ctx[i, -1], truth[i, 0]) for i in range(sequences)]
        gc = [chunk_shift(ctx[i, -1], gen[i]) for i in range(sequences)]
        tcs = [chunk_shift(ctx[i, -1], truth[i]) for i in range(sequences)]
        out[key] = {
            "generated_shift_px": [int(v) for v in gs],
            "true_shift_px": [int(v) for v in ts],
            "sign_agrees": int(sum(1 for g, t in zip(gs, ts) if np.sign(g) == np.sign(t) and t != 0)),
            "generated_chunk_shift_px": [int(v) for v in gc],
            "true_chunk_shift_px": [int(v) for v in tcs],
            "chunk_sign_agrees": int(sum(1 for g, t in zip(gc, tcs) if np.sign(g) == np.sign(t) and t != 0)),
        }
    for key, other in (("turn_left", "turn_right"), ("turn_right", "turn_left")):
        g = gens[key].reshape(-1, *gens[key].shape[2:])
        own = psnr(g, truths[key].reshape(g.shape)).reshape(sequences, f).mean(1)
        wrong = psnr(g, truths[other].reshape(g.shape)).reshape(sequences, f).mean(1)
        out[key]["closer_to_own_truth"] = int((own > wrong).sum())
        out[key]["psnr_own"] = float(own.mean())
        out[key]["psnr_other"] = float(wrong.mean())
    return out
