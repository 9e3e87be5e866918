"""The tiny world (``reactor_world.tiny``): the renderer's rules, the training file's checks, and
the model's two paths (teacher-forced training and the cached session) giving the same numbers."""

from __future__ import annotations

import os
import tempfile
import unittest
from dataclasses import replace

import numpy as np
import torch

from reactor_world.cache import BlockCache
from reactor_world.tiny.data import TrainingDataError, generate, read_training_file, write_training_file
from reactor_world.tiny.evaluate import horizontal_shift
from reactor_world.tiny.model import TINY_WORLD, ActionWanModel, train_mask
from reactor_world.tiny.render import ACTION_KEYS, World, actions_from_keys, random_actions, random_pose, rollout, turn_actions

SMALL = replace(TINY_WORLD, dim=32, ffn_dim=64, num_heads=2, num_layers=2).check()


def key(name: str, n: int = 1, frames: int = 1) -> np.ndarray:
    a = np.zeros((n, frames, len(ACTION_KEYS)), np.uint8)
    a[:, :, ACTION_KEYS.index(name)] = 1
    return a


class RendererTest(unittest.TestCase):
    def test_the_same_seed_draws_the_same_frames(self) -> None:
        w = World()
        a = rollout(w, random_pose(w, np.random.default_rng(3), 2), random_actions(np.random.default_rng(4), 2, 6))[0]
        b = rollout(w, random_pose(w, np.random.default_rng(3), 2), random_actions(np.random.default_rng(4), 2, 6))[0]
        self.assertEqual(a.shape, (2, 6, 64, 64, 3))
        self.assertTrue(np.array_equal(a, b))

    def test_turning_left_moves_the_picture_right_and_right_left(self) -> None:
        w = World()
        pose = random_pose(w, np.random.default_rng(11), 8)
        still = w.render(pose)
        for name, sign in (("turn_left", 1), ("turn_right", -1)):
            turned, _ = rollout(w, pose, key(name, 8))
            shifts = [horizontal_shift(still[i], turned[i, 0]) for i in range(8)]
            self.assertTrue(all(np.sign(s) == sign for s in shifts), f"{name}: {shifts}")

    def test_forward_into_a_wall_stops_at_the_wall(self) -> None:
        w = World()
        pose = np.array([[1.5, 1.5, np.pi]])  # facing the west border wall from its cell
        _, poses = rollout(w, pose, key("forward", 1, 10))
        self.assertGreater(poses[0, -1, 0], 1.0 + 0.19)

    def test_held_keys_map_to_bits_and_an_unknown_key_is_refused(self) -> None:
        self.assertEqual(actions_from_keys(["w", "a"]).tolist(), [1, 0, 1, 0, 0, 0])
        with self.assertRaises(KeyError):
            actions_from_keys(["x"])


class TrainingFileTest(unittest.TestCase):
    def test_a_written_file_reads_back_and_a_truncated_one_is_named_truncated(self) -> None:
        frames, actions = generate(3, 6, data_seed=1)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "train.npz")
            write_training_file(p, frames, actions, data_seed=1)
            f2, a2, meta = read_training_file(p)
            self.assertTrue(np.array_equal(f2, frames) and np.array_equal(a2, actions))
            self.assertEqual(meta["data_seed"], 1)
            with open(p, "rb") as f:
                raw = f.read()
            with open(p, "wb") as f:
                f.write(raw[: len(raw) // 2])
            with self.assertRaises(TrainingDataError) as e:
                read_training_file(p)
            self.assertIn("truncated", str(e.exception))
            self.assertEqual(e.exception.code, "world_training_data_invalid")

    def test_train_py_names_a_truncated_training_file_and_stops(self) -> None:
        """The door a user opens: ``train.py --data FILE`` as typed, on a file cut short."""
        import subprocess
        import sys

        frames, actions = generate(2, 6, data_seed=3)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "rec.npz")
            write_training_file(p, frames, actions, source="recording")
            with open(p, "r+b") as f:
                f.truncate(os.path.getsize(p) - 100)
            script = os.path.join(os.path.dirname(__file__), "..", "..", "train", "train.py")
            r = subprocess.run([sys.executable, script, "--out", os.path.join(d, "out"), "--data", p, "--device", "cpu"], capture_output=True, text=True, timeout=120)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"TrainingDataError: training file {p} is truncated or not an .npz", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "out", "tiny-world.safetensors")))

    def test_a_file_of_another_shape_is_refused_by_name(self) -> None:
        frames, actions = generate(2, 6, data_seed=2)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "train.npz")
            write_training_file(p, frames[:, :5], actions[:, :5])
            with self.assertRaises(TrainingDataError) as e:
                read_training_file(p)
            self.assertIn("not a whole number of 3-frame chunks", str(e.exception))

    def test_the_data_is_the_same_whatever_the_workers(self) -> None:
        a = generate(5, 6, data_seed=9, workers=1, block=2)
        b = generate(5, 6, data_seed=9, workers=2, block=2)
        self.assertTrue(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))


    def test_turn_heavy_clips_change_the_turn_key_only_where_a_chunk_starts(self) -> None:
        a = turn_actions(np.random.default_rng(5), 64, 18)
        turn = a[:, :, ACTION_KEYS.index("turn_right")].astype(int) - a[:, :, ACTION_KEYS.index("turn_left")]
        changes = turn[:, 1:] != turn[:, :-1]  # change between frame t and t + 1
        starts = np.arange(1, 18) % 3 == 0
        self.assertFalse(changes[:, ~starts].any())
        self.assertGreater(changes[:, starts].mean(), 0.2)
        self.assertGreater(a[:, :, 2:4].mean(), 0.3)  # a turn key is held in most frames
        # The player's clips of a data seed are what they were; the turn-heavy ones differ.
        p, t = generate(2, 6, data_seed=0), generate(2, 6, data_seed=0, style="turns")
        self.assertTrue(np.array_equal(p[1], generate(2, 6, data_seed=0)[1]))
        self.assertFalse(np.array_equal(p[1], t[1]))
        with self.assertRaises(ValueError):
            generate(1, 3, data_seed=0, style="spin")


class ModelPathsTest(unittest.TestCase):
    def test_teacher_forced_training_sees_what_the_rolling_cache_holds(self) -> None:
        """Six chunks (the 4-chunk cache rolls twice): the training pass's flow of each noisy chunk
        equals the cached pass's, chunk by chunk, with the clean pass written in between."""
        torch.manual_seed(0)
        cfg = SMALL
        m = ActionWanModel(cfg)
        m.generate_weights(5)
        m.eval()
        chunks, f = 6, cfg.chunk_frames
        t = chunks * f
        clean = torch.randn(1, 3, t, 64, 64)
        noisy = torch.randn(1, 3, t, 64, 64)
        tn = torch.rand(1, chunks).repeat_interleave(f, 1) * 1000
        tc = torch.rand(1, chunks).repeat_interleave(f, 1) * 100
        act = torch.randint(0, 2, (1, t, 6)).float()
        mask = train_mask(chunks, f, cfg.frame_tokens, cfg.window_frames // f, torch.device("cpu"))
        with torch.no_grad():
            train = m.forward_train(noisy, tn, clean, tc, act, mask)
            caches = [BlockCache(1, cfg.cache_tokens, cfg.num_heads, cfg.head_dim, 0, torch.float32, torch.device("cpu")) for _ in range(cfg.num_layers)]
            for c in range(chunks):
                s = slice(c * f, (c + 1) * f)
                got = m(noisy[:, :, s], tn[:, s], act[:, s], caches, c * f)
                m(clean[:, :, s], tc[:, s], act[:, s], caches, c * f)
                diff = float((got - train[:, :, s]).abs().max())
                self.assertLess(diff, 1e-4, f"chunk {c}: max difference {diff}")

    def test_the_actions_reach_the_output(self) -> None:
        cfg = SMALL
        m = ActionWanModel(cfg)
        m.generate_weights(6)
        x = torch.randn(1, 3, 3, 64, 64)
        t = torch.full((1, 3), 500.0)
        outs = []
        with torch.no_grad():
            for a in (key("forward", 1, 3), key("turn_left", 1, 3)):
                caches = [BlockCache(1, cfg.cache_tokens, cfg.num_heads, cfg.head_dim, 0, torch.float32, torch.device("cpu")) for _ in range(cfg.num_layers)]
                outs.append(m(x, t, torch.from_numpy(a).float(), caches, 0))
        self.assertGreater(float((outs[0] - outs[1]).abs().max()), 1e-3)


if __name__ == "__main__":
    unittest.main()
