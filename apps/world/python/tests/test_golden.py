"""Our module against the reference (guandeh17/Self-Forcing), on the small config, identical weights.

The golden tensors were made by ``apps/world/scripts/reference_golden.py`` running the reference's
own ``CausalWanModel``, ``WanDiffusionWrapper``, ``FlowMatchScheduler``,
``CausalInferencePipeline`` and ``TAEHV`` (commit and tolerance in ``small.json``).
"""

from __future__ import annotations

import hashlib
import unittest

import torch

from reactor_world.cache import BlockCache, CrossCache
from reactor_world.checkpoint import check_state_dict
from reactor_world.decoder import DecoderState, TinyDecoder
from reactor_world.scheduler import FlowMatch
from reactor_world.text import hashed_embedding

from .helpers import close, golden, session

PROMPT = "a walk through a forest"


def sha(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        h.update(k.encode())
        h.update(tensors[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class GoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.g, cls.meta = golden()
        cls.tol = cls.meta["tolerance"]
        weights = {k[2:]: v for k, v in cls.g.items() if k.startswith("w.")}
        cls.s = session(weights=weights)
        check_state_dict(weights, cls.s.model.state_dict(), "golden", "small DiT")
        cls.cfg = cls.s.cfg

    def assertClose(self, ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
        self.assertEqual(tuple(ours.shape), tuple(ref.shape), what)
        ok, worst = close(ours, ref, self.tol["rtol"], self.tol["atol"])
        self.assertTrue(ok, f"{what}: max |ours - reference| = {worst:.3g} beyond rtol {self.tol['rtol']} / atol {self.tol['atol']}")

    def test_prompt_embedding_is_the_goldens(self) -> None:
        self.assertTrue(torch.equal(hashed_embedding(PROMPT, self.cfg.text_dim, self.cfg.text_len), self.g["prompt"]))

    def test_the_compiled_blocks_real_rope_equals_the_eager_complex_one(self) -> None:
        from reactor_world.model import apply_rope, rope_factors

        f = rope_factors(self.cfg.head_dim, 3, 3, 4, 7, torch.device("cpu"))
        x = torch.randn(1, 36, self.cfg.num_heads, self.cfg.head_dim, generator=torch.Generator().manual_seed(1))
        self.assertTrue(torch.equal(apply_rope(x, f), apply_rope(x, torch.complex(f[0], f[1]))))

    def test_one_denoising_pass_matches_the_reference(self) -> None:
        cfg, m = self.cfg, self.s.model
        caches = [BlockCache(1, cfg.cache_tokens, cfg.num_heads, cfg.head_dim, cfg.sink_frames * cfg.frame_tokens, torch.float32, torch.device("cpu")) for _ in range(cfg.num_layers)]
        cross = [CrossCache() for _ in range(cfg.num_layers)]
        x = self.g["noise"][:, : cfg.chunk_frames]
        t = torch.ones([1, cfg.chunk_frames]) * 1000.0
        with torch.no_grad():
            ctx = m.embed_text(self.g["prompt"].unsqueeze(0))
            flow = m(x.permute(0, 2, 1, 3, 4), t, ctx, caches, cross, 0).permute(0, 2, 1, 3, 4)
        self.assertClose(flow, self.g["flow0"], "the flow prediction of chunk 0 at t=1000")
        x0 = FlowMatch(cfg.timestep_shift).to_x0(flow.flatten(0, 1), x.flatten(0, 1), t.flatten(0, 1)).unflatten(0, flow.shape[:2])
        self.assertClose(x0, self.g["x0_0"], "x0 of chunk 0 at t=1000")
        self.assertGreater(float(flow.abs().mean()), 0.01, "the flow must not be trivially zero")

    def test_five_chunks_match_the_reference_loop_through_the_rolling_cache(self) -> None:
        cfg, s = self.cfg, self.s
        s.reset()
        f = cfg.chunk_frames
        per = len(cfg.denoising_steps) - 1
        draws = self.g["draws"]
        for c in range(self.meta["chunks"]):
            noise = self.g["noise"][:, c * f : (c + 1) * f]
            renoise = [draws[c * per + i] for i in range(per)]
            out = s.step(PROMPT, 0, cfg.denoising_steps, noise=(noise, renoise))
            # chunk 0: a whole chunk; 1: reads the cache; 3 and 4: after the window rolled.
            self.assertClose(out.latents, self.g["latents"][:, c * f : (c + 1) * f], f"chunk {c}'s latents")
        self.assertEqual(s.caches[0].local_end, cfg.window_frames * cfg.frame_tokens, "the cache is full and rolled")

    def test_the_streamed_decoder_matches_taehv_decoding_the_whole_sequence(self) -> None:
        dec = TinyDecoder()
        dec.generate_weights(self.meta["decoder_seed"])
        self.assertEqual(sha(dec.state_dict()), self.meta["decoder_weights_sha256"], "the seeded decoder weights differ from the golden's (torch's CPU generator changed?)")
        state = DecoderState()
        lat = self.g["decoder_latents"][0]
        with torch.no_grad():
            parts = [dec.decode(lat[:3], state), dec.decode(lat[3:], state)]
        self.assertEqual([p.shape[0] for p in parts], [9, 12], "the first chunk gives 9 frames, the next 12")
        self.assertClose(torch.cat(parts), self.g["decoder_frames"][0][TinyDecoder.trim :], "the decoded frames")


if __name__ == "__main__":
    unittest.main()
