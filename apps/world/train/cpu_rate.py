#!/usr/bin/env python3
"""Model-only speed of the shipped tiny-world weights on this CPU, bf16 and fp32 (docs/benchmarks.md, issue 40)."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import time, numpy as np, torch
from reactor_world.checkpoint import read_checkpoint
from reactor_world.tiny.model import TINY_WORLD, ActionWanModel
from reactor_world.tiny.session import TinySession
from reactor_world.tiny.render import World, random_pose, rollout
m = ActionWanModel(TINY_WORLD); m.load_state_dict({k: v.float() for k, v in read_checkpoint(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights", "tiny-world.safetensors")).items()})
for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    mm = ActionWanModel(TINY_WORLD); mm.load_state_dict(m.state_dict()); mm = mm.to(dt).eval().requires_grad_(False)
    w = World(); pose = random_pose(w, np.random.default_rng(0), 1); still = np.zeros((1, 3, 6), np.uint8); ctx, _ = rollout(w, pose, still)
    s = TinySession(mm, TINY_WORLD, torch.device("cpu"), dt); s.start(torch.from_numpy(ctx), torch.from_numpy(still))
    a = torch.zeros(3, 6); a[:, 0] = 1
    s.step(a)
    n = 8 if name == "bf16" else 2
    t = time.perf_counter()
    for _ in range(n): s.step(a)
    dtm = (time.perf_counter() - t) / n
    print(f"{name}: {dtm*1000:.0f} ms a chunk, {3/dtm:.1f} fps, torch {torch.__version__}, {torch.get_num_threads()} threads")
