"""The checkpoint loader: the reference's key layouts load; a wrong, truncated or misshapen file is refused naming the key."""

from __future__ import annotations

import os
import tempfile
import unittest

import torch

from reactor_world.checkpoint import CheckpointError, check_state_dict, read_checkpoint, write_safetensors
from reactor_world.configs import ConfigError, config_named
from reactor_world.model import CausalWanModel


def small_state() -> dict[str, torch.Tensor]:
    m = CausalWanModel(config_named("small"))
    m.generate_weights(3)
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


class CheckpointTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.sd = small_state()
        self.want = CausalWanModel(config_named("small")).state_dict()

    def tearDown(self) -> None:
        self.dir.cleanup()

    def path(self, name: str) -> str:
        return os.path.join(self.dir.name, name)

    def check(self, sd: dict[str, torch.Tensor]) -> None:
        check_state_dict(sd, self.want, "ckpt", "small DiT")

    def test_wan_safetensors_layout_loads_bit_exact_in_bf16_and_fp32(self) -> None:
        for dtype in (torch.float32, torch.bfloat16):
            write_safetensors(self.path("w.safetensors"), {k: v.to(dtype) for k, v in self.sd.items()})
            got = read_checkpoint(self.path("w.safetensors"))
            self.check(got)
            for k, v in self.sd.items():
                self.assertTrue(torch.equal(got[k], v.to(dtype)), k)

    def test_sharded_wan_folder_with_an_index_loads(self) -> None:
        keys = sorted(self.sd)
        half = len(keys) // 2
        parts = {"diffusion_pytorch_model-00001-of-00002.safetensors": keys[:half], "diffusion_pytorch_model-00002-of-00002.safetensors": keys[half:]}
        weight_map = {}
        for name, ks in parts.items():
            write_safetensors(self.path(name), {k: self.sd[k] for k in ks})
            weight_map.update({k: name for k in ks})
        import json

        with open(self.path("diffusion_pytorch_model.safetensors.index.json"), "w") as f:
            json.dump({"weight_map": weight_map}, f)
        self.check(read_checkpoint(self.dir.name))

    def test_self_forcing_generator_dict_with_model_prefix_loads(self) -> None:
        torch.save({"generator": {f"model.{k}": v for k, v in self.sd.items()}, "generator_ema": {f"model.{k}": v * 0 for k, v in self.sd.items()}}, self.path("self_forcing_dmd.pt"))
        got = read_checkpoint(self.path("self_forcing_dmd.pt"))
        self.check(got)
        self.assertTrue(torch.equal(got["head.head.weight"], self.sd["head.head.weight"]))
        ema = read_checkpoint(self.path("self_forcing_dmd.pt"), "generator_ema")
        self.assertEqual(float(ema["head.head.weight"].abs().sum()), 0.0)

    def test_a_missing_key_is_named(self) -> None:
        sd = dict(self.sd)
        del sd["blocks.1.cross_attn.k.weight"]
        with self.assertRaisesRegex(CheckpointError, r"missing key 'blocks\.1\.cross_attn\.k\.weight' of the small DiT"):
            self.check(sd)

    def test_an_extra_key_is_named(self) -> None:
        sd = dict(self.sd, **{"img_emb.proj.0.weight": torch.zeros(3)})
        with self.assertRaisesRegex(CheckpointError, r"unexpected key 'img_emb\.proj\.0\.weight'"):
            self.check(sd)

    def test_a_misshapen_key_is_named_with_both_shapes(self) -> None:
        sd = dict(self.sd, **{"blocks.0.ffn.0.weight": torch.zeros(7, 48)})
        with self.assertRaisesRegex(CheckpointError, r"key 'blocks\.0\.ffn\.0\.weight' has shape \[7, 48\], the small DiT needs \[96, 48\]"):
            self.check(sd)

    def test_a_checkpoint_of_the_1_3b_given_to_the_small_config_says_what_it_looks_like(self) -> None:
        sd = dict(self.sd, **{"patch_embedding.weight": torch.zeros(1536, 16, 1, 2, 2)})
        with self.assertRaisesRegex(CheckpointError, r"looks like Wan2\.1 1\.3B \(model: wan-1\.3b\)"):
            self.check(sd)

    def test_a_checkpoint_of_another_model_is_refused_whole(self) -> None:
        with self.assertRaisesRegex(CheckpointError, r"none of the \d+ keys of the small DiT is in it"):
            self.check({"conv1.weight": torch.zeros(3), "fc.bias": torch.zeros(2)})

    def test_a_truncated_safetensors_file_is_named_truncated(self) -> None:
        write_safetensors(self.path("w.safetensors"), self.sd)
        size = os.path.getsize(self.path("w.safetensors"))
        with open(self.path("w.safetensors"), "r+b") as f:
            f.truncate(size - 100)
        with self.assertRaisesRegex(CheckpointError, r"truncated: tensor '.+' ends at byte \d+, the file has \d+"):
            read_checkpoint(self.path("w.safetensors"))
        with open(self.path("w.safetensors"), "r+b") as f:
            f.truncate(20)
        with self.assertRaisesRegex(CheckpointError, r"truncated: its header says"):
            read_checkpoint(self.path("w.safetensors"))

    def test_a_truncated_pt_file_is_refused(self) -> None:
        torch.save(self.sd, self.path("w.pt"))
        with open(self.path("w.pt"), "r+b") as f:
            f.truncate(os.path.getsize(self.path("w.pt")) // 2)
        with self.assertRaisesRegex(CheckpointError, r"cannot be read as a torch checkpoint .*is it truncated\?"):
            read_checkpoint(self.path("w.pt"))

    def test_a_missing_file_names_the_setting(self) -> None:
        with self.assertRaisesRegex(CheckpointError, r"does not exist; set the app config's checkpoint"):
            read_checkpoint(self.path("nope.safetensors"))


class ConfigTest(unittest.TestCase):
    def test_a_resolution_off_the_patch_grid_is_refused_with_the_nearest(self) -> None:
        with self.assertRaisesRegex(ConfigError, r"850x480 is not a multiple of 16 pixels .* use e\.g\. 848x480"):
            config_named("wan-1.3b", width=850)

    def test_a_window_smaller_than_sink_plus_chunk_is_refused(self) -> None:
        with self.assertRaisesRegex(ConfigError, r"window_frames \(4\) must hold the sink \(3\) and one chunk \(3\)"):
            config_named("small", window_frames=4)

    def test_an_unknown_config_and_field_are_named(self) -> None:
        with self.assertRaisesRegex(ConfigError, r"unknown model config 'wan-2b'; known: wan-1\.3b, wan-14b, small"):
            config_named("wan-2b")
        with self.assertRaisesRegex(ConfigError, r"unknown config field\(s\) heads"):
            config_named("small", heads=3)

    def test_real_scale_configs_have_the_published_sizes(self) -> None:
        c = config_named("wan-1.3b")
        self.assertEqual((c.dim, c.ffn_dim, c.num_heads, c.num_layers, c.frame_tokens), (1536, 8960, 12, 30, 1560))
        self.assertAlmostEqual(c.parameters() / 1e9, 1.42, places=2)
        self.assertAlmostEqual(config_named("wan-14b").parameters() / 1e9, 14.29, places=2)


if __name__ == "__main__":
    unittest.main()
