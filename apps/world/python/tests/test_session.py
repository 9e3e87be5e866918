"""The KV cache as the session's state: reset, re-cache on a prompt switch, rolling, flat memory, isolation."""

from __future__ import annotations

import unittest

import torch

from reactor_world.worker import WorldInputInvalid, WorldOutOfMemory, WorldWorker

from .helpers import session


class SessionTest(unittest.TestCase):
    def test_same_seed_same_frames_and_reset_clears_the_cache(self) -> None:
        s = session()
        a = [s.step("a forest", 5, s.cfg.denoising_steps).frames for _ in range(3)]
        self.assertEqual([f.shape[0] for f in a], [9, 12, 12])
        self.assertGreater(s.caches[0].local_end, 0)
        s.reset()
        self.assertEqual((s.caches[0].local_end, s.frame, s.chunk), (0, 0, 0))
        b = [s.step("a forest", 5, s.cfg.denoising_steps).frames for _ in range(3)]
        for x, y in zip(a, b):
            self.assertTrue(torch.equal(x, y), "a reset session replays the same frames")

    def test_the_cache_changes_what_the_next_chunk_is(self) -> None:
        s1, s2 = session(), session()
        s1.step("a forest", 1, s1.cfg.denoising_steps)
        s2.step("a desert", 1, s2.cfg.denoising_steps)
        # Chunk 1 with the same prompt and noise, after different chunk 0s: the cache is read.
        n = s1.noise_for(9, 1, len(s1.cfg.denoising_steps))
        a = s1.step("a city", 9, s1.cfg.denoising_steps, noise=n).latents
        b = s2.step("a city", 9, s2.cfg.denoising_steps, noise=n).latents
        self.assertFalse(torch.allclose(a, b))

    def test_a_prompt_switch_recaches_the_kept_frames_under_the_new_prompt(self) -> None:
        s = session()
        for _ in range(4):
            s.step("a forest", 2, s.cfg.denoising_steps)
        before = s.caches[1].k[:, : s.caches[1].local_end].clone()
        out = s.step("a city at night", 2, s.cfg.denoising_steps)
        self.assertTrue(out.recached)
        self.assertFalse(torch.allclose(before, s.caches[1].k[:, : before.shape[1]]), "the keys of the kept frames changed")
        self.assertEqual(s.caches[1].local_end, s.cfg.cache_tokens)
        # Without the switch, the same chunk differs: the prompt took effect at this chunk.
        same = session()
        for _ in range(4):
            same.step("a forest", 2, same.cfg.denoising_steps)
        self.assertFalse(torch.equal(same.step("a forest", 2, same.cfg.denoising_steps).frames, out.frames))

    def test_memory_stays_flat_over_a_long_rollout(self) -> None:
        s = session()
        ptrs = [c.k.data_ptr() for c in s.caches]
        for i in range(40):
            s.step("a forest" if i < 20 else "a sea", 3, s.cfg.denoising_steps)
        self.assertEqual([c.k.data_ptr() for c in s.caches], ptrs, "the cache is never reallocated")
        self.assertLessEqual(sum(l.shape[1] for _, l in s.kept), s.cfg.window_frames)
        self.assertEqual(s.frame, 40 * s.cfg.chunk_frames)

    def test_a_session_after_reset_does_not_see_the_previous_cache(self) -> None:
        s = session()
        for _ in range(3):
            s.step("a forest", 4, s.cfg.denoising_steps)
        s.reset()
        after = s.step("a city", 8, s.cfg.denoising_steps).frames
        clean = session().step("a city", 8, session().cfg.denoising_steps).frames
        self.assertTrue(torch.equal(after, clean))


class WorkerInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.w = WorldWorker()
        cls.w.load(model="small", warmup=False)

    def test_generate_returns_frames_and_the_weights_kind(self) -> None:
        r = self.w.generate({"prompt": "a forest", "seed": 1})
        self.assertEqual((r["n"], r["height"], r["width"]), (9, 48, 64))
        self.assertEqual(r["frames"].shape, (9, 48, 64, 3))
        self.assertEqual(r["weights"]["kind"], "generated")
        r2 = self.w.generate({"prompt": "a forest", "seed": 1, "quality": "fast"})
        self.assertEqual((r2["n"], r2["steps"]), (12, 2))

    def test_a_cuda_out_of_memory_becomes_world_out_of_memory_naming_what_to_lower(self) -> None:
        oom = getattr(torch.cuda, "OutOfMemoryError", MemoryError)

        def boom(*_a, **_k):
            raise oom("CUDA out of memory. Tried to allocate 2.00 GiB")

        real = self.w.session.step
        self.w.session.step = boom  # type: ignore[method-assign]
        try:
            with self.assertRaisesRegex(WorldOutOfMemory, r"CUDA ran out of memory generating chunk \d+ of small at 64x48 .*lower window_frames, the resolution, or use wan-1\.3b; the runner is rebuilt"):
                self.w.generate({"prompt": "x"})
        finally:
            self.w.session.step = real  # type: ignore[method-assign]
        self.assertEqual(WorldOutOfMemory.code, "world_out_of_memory")

    def test_bad_inputs_are_named(self) -> None:
        with self.assertRaisesRegex(WorldInputInvalid, "prompt must be a string, got int"):
            self.w.generate({"prompt": 3})
        with self.assertRaisesRegex(WorldInputInvalid, r"seed must be an integer in 0\.\.2147483647, got -1"):
            self.w.generate({"prompt": "x", "seed": -1})
        with self.assertRaisesRegex(WorldInputInvalid, "quality 'best' is not one of full, fast"):
            self.w.generate({"prompt": "x", "quality": "best"})


if __name__ == "__main__":
    unittest.main()
