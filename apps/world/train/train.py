#!/usr/bin/env python3
"""Trains the tiny world model (``tiny-world``) from the renderer's frames, evaluates it, saves it.

    python3 apps/world/train/train.py --out OUT [--minutes 6] [--seed 0] [--data-seed 0]

One run, seeded, on one GPU (or a CPU at a toy size, ``--tiny``):

1. data: ``--sequences`` random held-key sequences of ``--frames`` frames from the renderer
   (``reactor_world/tiny/render.py``), and ``--turn-sequences`` turn-heavy ones after them, written to ``OUT/train.npz`` (``tiny/data.py``'s format) and
   read back through the same checks a user's file gets; ``--data FILE`` trains on a given file
   (a recorded session, say) instead;
2. training: flow matching, teacher-forced (CausVid): each clip of 6 chunks runs once, clean and
   noisy copies side by side under the block-causal mask of the rolling cache; every chunk has
   its own noise level (diffusion forcing), the clean context a small one (so the model forgives
   its own imperfect past); AdamW, bf16 autocast, an EMA of the weights; the loop stops at
   ``--minutes`` of wall time (or ``--steps``), whichever is first; the loss goes to ``OUT/loss.csv``;
3. evaluation of the EMA weights through the inference path (``TinySession``: 4 steps a chunk
   over the KV cache): drift and the action test (``tiny/evaluate.py``), and the model-only speed
   at batch 1;
4. ``OUT/tiny-world.safetensors`` (fp16) and ``OUT/tiny-world.json``: its sha256, the seeds, the
   command, the steps, the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from reactor_world.checkpoint import write_safetensors  # noqa: E402
from reactor_world.tiny.data import generate, read_training_file, write_training_file  # noqa: E402
from reactor_world.tiny.evaluate import evaluate_actions, evaluate_drift  # noqa: E402
from reactor_world.tiny.model import TINY_WORLD, ActionWanModel, train_mask  # noqa: E402
from reactor_world.tiny.session import TinySession, from_pixels  # noqa: E402
from reactor_world.tiny.render import World, random_pose, rollout  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def write_info(out: str, info: dict) -> None:
    with open(os.path.join(out, "tiny-world.json"), "w") as f:
        json.dump(info, f, indent=2)


def bench(model: ActionWanModel, cfg, device: torch.device, dtype: torch.dtype, chunks: int) -> dict:
    """Model-only speed at batch 1: chunks a second, frames a second, the chunk's latency (command to pixels in the model)."""
    world = World()
    rng = np.random.default_rng(7)
    pose = random_pose(world, rng, 1)
    still = np.zeros((1, cfg.chunk_frames, 6), np.uint8)
    ctx, _ = rollout(world, pose, still)
    s = TinySession(model, cfg, device, dtype, batch=1)
    s.start(torch.from_numpy(ctx), torch.from_numpy(still))
    fwd = np.zeros((cfg.chunk_frames, 6), np.uint8)
    fwd[:, 0] = 1
    a = torch.from_numpy(fwd)
    for _ in range(5):
        s.step(a)
    times = []
    for _ in range(chunks):
        t0 = time.perf_counter()
        s.step(a).cpu()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    mean = sum(times) / len(times)
    return {
        "chunks": chunks,
        "chunk_ms_mean": round(mean, 2),
        "chunk_ms_p50": round(times[len(times) // 2], 2),
        "chunk_ms_p95": round(times[int(len(times) * 0.95) - 1], 2),
        "fps": round(cfg.chunk_frames * 1000 / mean, 1),
        "note": "batch 1, 4 steps + the clean pass a chunk of 3 frames, to uint8 on the host; command-to-pixel in the model = one chunk's latency",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0, help="the model's init and the training batches")
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--data", help="train on this training file instead of generating one")
    ap.add_argument("--data-out", help="where the generated training file goes (default OUT/train.npz)")
    ap.add_argument("--data-only", action="store_true", help="write OUT/train.npz and stop")
    ap.add_argument("--sequences", type=int, default=6144)
    ap.add_argument("--turn-sequences", type=int, default=0, help="as many more generated sequences again, turn-heavy, their turn key changing on chunk boundaries (render.turn_actions)")
    ap.add_argument("--frames", type=int, default=18, help="frames a training clip (a whole number of 3-frame chunks)")
    ap.add_argument("--minutes", type=float, default=6.5, help="the training loop's wall-clock budget")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--deadline", type=float, default=0, help="seconds from the start by which the whole run must end (0: none); training stops --reserve seconds before it")
    ap.add_argument("--reserve", type=float, default=75, help="seconds kept for evaluation and saving before --deadline")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=4e-4)
    ap.add_argument("--ema", type=float, default=0.998)
    ap.add_argument("--init", help="start from these weights (a tiny-world.safetensors) instead of the seeded init: a fine-tune")
    ap.add_argument("--sigma-power", type=float, default=1.0, help="noise levels drawn as 1 - (1 - u)^p: 1 uniform, 2 twice as many at high noise (where the keys decide the picture)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--context-sigma", type=float, default=0.1, help="the clean context's noise level is drawn in 0..this")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--eval-sequences", type=int, default=20)
    ap.add_argument("--eval-chunks", type=int, default=16)
    ap.add_argument("--eval-dtypes", default="fp32,bf16", help="the dtypes the inference path is evaluated in (bf16 is what the app runs)")
    ap.add_argument("--bench-chunks", type=int, default=200)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="a CPU rehearsal: a 2-block model, few sequences")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    cfg = TINY_WORLD
    if args.tiny:
        from dataclasses import replace

        cfg = replace(cfg, dim=32, ffn_dim=64, num_heads=2, num_layers=1).check()
    log(f"torch {torch.__version__}; config {cfg.name} dim {cfg.dim} x {cfg.num_layers} blocks")

    # 1. data
    if args.data:
        frames, actions, meta = read_training_file(args.data)
        data_path = args.data
    else:
        t0 = time.perf_counter()
        frames, actions = generate(args.sequences, args.frames, args.data_seed, workers=args.workers)
        if args.turn_sequences > 0:
            tf, ta = generate(args.turn_sequences, args.frames, args.data_seed, workers=args.workers, style="turns")
            frames, actions = np.concatenate([frames, tf]), np.concatenate([actions, ta])
            del tf, ta
        data_path = args.data_out or os.path.join(args.out, "train.npz")
        write_training_file(data_path, frames, actions, data_seed=args.data_seed)
        frames, actions, meta = read_training_file(data_path)
        log(f"data: {frames.shape[0]} sequences x {frames.shape[1]} frames in {time.perf_counter() - t0:.1f}s -> {data_path}")
    if args.data_only:
        return 0
    # CUDA starts only now: the data workers above are forked from a process without it.
    log(f"device {torch.cuda.get_device_name(device) if cuda else platform.processor() or 'cpu'}")
    n_seq, n_frames = frames.shape[0], frames.shape[1]
    chunks = n_frames // cfg.chunk_frames

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = ActionWanModel(cfg)
    model.init_for_training(args.seed)
    if args.init:
        from reactor_world.checkpoint import read_checkpoint
        from reactor_world.tiny.model import check_weights

        sd = read_checkpoint(args.init)
        check_weights(sd, model.state_dict(), args.init)
        model.load_state_dict({k: v.float() for k, v in sd.items()})
        log(f"fine-tuning from {args.init} (sha256 {sha256(args.init)})")
    model.to(device)
    ema = ActionWanModel(cfg).to(device)
    ema.load_state_dict(model.state_dict())
    ema.requires_grad_(False)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.01)
    gpu_frames = torch.from_numpy(frames).to(device)
    gpu_actions = torch.from_numpy(actions).to(device)
    mask = train_mask(chunks, cfg.chunk_frames, cfg.frame_tokens, cfg.window_frames // cfg.chunk_frames, device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    budget = args.minutes * 60
    if args.deadline > 0:
        left = args.deadline - (time.perf_counter() - t_start) - args.reserve
        if left < budget:
            log(f"training budget cut from {budget:.0f}s to {left:.0f}s by --deadline {args.deadline:.0f}")
            budget = max(10.0, left)
    warmup = max(1, args.warmup)
    loss_rows = []
    t_train = time.perf_counter()
    step = 0
    running = None
    while step < args.steps:
        elapsed = time.perf_counter() - t_train
        if elapsed >= budget:
            break
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, n_seq, (args.batch,), generator=gen, device=device)
        x0 = from_pixels(gpu_frames[idx])  # [B, 3, T, H, W]
        act = gpu_actions[idx].float()
        b = x0.shape[0]
        # Diffusion forcing: one noise level a chunk (uniform sigma: the schedule's shift is 1).
        sig = (1 - (1 - torch.rand(b, chunks, generator=gen, device=device)) ** args.sigma_power).repeat_interleave(cfg.chunk_frames, dim=1)
        csig = torch.rand(b, chunks, generator=gen, device=device).repeat_interleave(cfg.chunk_frames, dim=1) * args.context_sigma
        noise = torch.randn(x0.shape, generator=gen, device=device)
        cnoise = torch.randn(x0.shape, generator=gen, device=device)
        s5, c5 = sig[:, None, :, None, None], csig[:, None, :, None, None]
        xt = (1 - s5) * x0 + s5 * noise
        xc = (1 - c5) * x0 + c5 * cnoise
        target = noise - x0
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            pred = model.forward_train(xt, sig * 1000, xc, csig * 1000, act, mask)
        loss = ((pred.float() - target) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            d = min(args.ema, (1 + step) / (10 + step))
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.lerp_(pm, 1 - d)
        step += 1
        if step % 25 == 0 or step == 1:
            v = float(loss.detach())
            running = v if running is None else 0.9 * running + 0.1 * v
            loss_rows.append((step, round(time.perf_counter() - t_train, 2), round(v, 5), round(running, 5), f"{lr:.6f}"))
            if step % 250 == 0 or step == 1:
                log(f"step {step} loss {v:.4f} (smoothed {running:.4f}) lr {lr:.2e} {time.perf_counter() - t_train:.0f}s")
    train_s = time.perf_counter() - t_train
    log(f"trained {step} steps in {train_s:.0f}s")
    with open(os.path.join(args.out, "loss.csv"), "w") as f:
        f.write("step,seconds,loss,smoothed,lr\n")
        for r in loss_rows:
            f.write(",".join(str(x) for x in r) + "\n")

    # 4. the weights and what made them.
    wpath = os.path.join(args.out, "tiny-world.safetensors")
    write_safetensors(wpath, {k: v.detach().half().cpu() for k, v in ema.state_dict().items()})
    info = {
        "config": cfg.name,
        "parameters": n_params,
        "weights": os.path.basename(wpath),
        "sha256": sha256(wpath),
        "bytes": os.path.getsize(wpath),
        "dtype": "float16",
        "seed": args.seed,
        "data_seed": args.data_seed,
        "data": {"source": meta.get("source"), "sequences": int(n_seq), "frames": int(n_frames), "map_seed": meta.get("map_seed"), **({"turn_sequences": args.turn_sequences} if args.turn_sequences and not args.data else {})},
        "command": "python3 apps/world/train/train.py " + " ".join(sys.argv[1:]),
        "init": {"weights": args.init, "sha256": sha256(args.init)} if args.init else None,
        "steps": step,
        "batch": args.batch,
        "train_seconds": round(train_s, 1),
        "total_seconds": round(time.perf_counter() - t_start, 1),
        "final_loss_smoothed": running,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": {},
    }
    write_info(args.out, info)
    log(f"saved {wpath} ({info['bytes']} bytes, sha256 {info['sha256']}); total {info['total_seconds']}s")

    # 3. evaluation of the EMA weights, through the inference path.
    ema.eval()
    dtype = torch.bfloat16 if cuda else torch.float32
    results: dict = {}
    info["results"] = results
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    for name in args.eval_dtypes.split(","):
        d = dtypes[name]
        m = ActionWanModel(cfg).to(device)
        m.load_state_dict({k: v.half().float() for k, v in ema.state_dict().items()})  # what ships: fp16 weights
        m = m.to(d).eval().requires_grad_(False)
        t0 = time.perf_counter()
        try:
            drift = evaluate_drift(m, cfg, device, d, sequences=args.eval_sequences, chunks=args.eval_chunks)
            acts = evaluate_actions(m, cfg, device, d, sequences=args.eval_sequences)
            sp = bench(m, cfg, device, d, args.bench_chunks)
        except Exception as e:  # noqa: BLE001 - the weights are saved already; say what failed
            import traceback

            traceback.print_exc()
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        results[name] = {"drift": drift, "actions": acts, "speed": sp, "eval_s": round(time.perf_counter() - t0, 1)}
        write_info(args.out, info)
        log(f"{name}: drift {json.dumps(drift['after_chunks'])}")
        log(f"{name}: turn_left sign {acts['turn_left']['sign_agrees']}/{args.eval_sequences}, closer {acts['turn_left']['closer_to_own_truth']}; turn_right sign {acts['turn_right']['sign_agrees']}/{args.eval_sequences}, closer {acts['turn_right']['closer_to_own_truth']}")
        log(f"{name}: speed {json.dumps(sp)}")
    del dtype
    info["total_seconds"] = round(time.perf_counter() - t_start, 1)
    write_info(args.out, info)
    log(f"done; total {info['total_seconds']}s")

    return 0


if __name__ == "__main__":
    sys.exit(main())
