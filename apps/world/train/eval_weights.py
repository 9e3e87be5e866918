#!/usr/bin/env python3
"""The drift and the action test of a tiny-world weights file, as train.py evaluates its own:
python3 apps/world/train/eval_weights.py WEIGHTS [--device cuda] [--dtype bf16] > result.json"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch  # noqa: E402

from reactor_world.checkpoint import read_checkpoint  # noqa: E402
from reactor_world.tiny.evaluate import evaluate_actions, evaluate_drift  # noqa: E402
from reactor_world.tiny.model import TINY_WORLD, ActionWanModel, check_weights  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("weights")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
ap.add_argument("--sequences", type=int, default=20)
args = ap.parse_args()
device, dtype = torch.device(args.device), {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
m = ActionWanModel(TINY_WORLD)
sd = read_checkpoint(args.weights)
check_weights(sd, m.state_dict(), args.weights)
m.load_state_dict({k: v.float() for k, v in sd.items()})
m = m.to(device).to(dtype).eval().requires_grad_(False)
t = time.time()
r = {
    "weights": args.weights,
    "dtype": args.dtype,
    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    "torch": torch.__version__,
    "drift": evaluate_drift(m, TINY_WORLD, device, dtype, sequences=args.sequences),
    "actions": evaluate_actions(m, TINY_WORLD, device, dtype, sequences=args.sequences),
}
r["seconds"] = round(time.time() - t, 1)
print(json.dumps(r))
