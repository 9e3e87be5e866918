#!/usr/bin/env python3
"""The action test of the shipped tiny-world weights on this CPU in bf16: python3 apps/world/train/cpu_eval.py apps/world/weights/tiny-world.safetensors"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import json, sys, time, torch
from reactor_world.checkpoint import read_checkpoint
from reactor_world.tiny.model import TINY_WORLD, ActionWanModel
from reactor_world.tiny.evaluate import evaluate_actions
m = ActionWanModel(TINY_WORLD); m.load_state_dict({k: v.float() for k, v in read_checkpoint(sys.argv[1]).items()})
m = m.to(torch.bfloat16).eval().requires_grad_(False)
t = time.time()
r = evaluate_actions(m, TINY_WORLD, torch.device("cpu"), torch.bfloat16, sequences=20)
r["seconds"] = round(time.time() - t, 1); r["torch"] = torch.__version__
print(json.dumps(r))
