"""Runs the reference implementation on the small config and writes the golden tensors.

    python3 apps/world/scripts/reference_golden.py --reference DIR [--out apps/world/test/golden]

DIR is a checkout of guandeh17/Self-Forcing (the commit in ``REFERENCE_COMMIT``); nothing of it is
copied into this repository: the script imports its files and saves what they compute. It builds
Self-Forcing's ``CausalWanModel``, ``WanDiffusionWrapper`` (flow -> x0), ``FlowMatchScheduler``
and ``CausalInferencePipeline.inference`` (the chunk loop with its KV cache and the clean
re-run), loads *our* weights into the reference model with ``strict=True`` (so our parameter
names are the reference's), runs five chunks of three latent frames (the window of nine frames
with a sink of three rolls from the fourth chunk on), and saves the inputs, every random draw and
every output. The decoder is compared with the reference's ``TAEHV`` (``demo_utils/taehv.py``) at
its real widths on a tiny picture.

What is shimmed, and why (the reference's own code runs otherwise):
- ``diffusers`` (ModelMixin/ConfigMixin), ``einops``, ``tqdm``, flex-attention and
  ``torch.compile`` are absent from Debian's torch 1.13: stubs that the inference path never calls;
- the attention kernels: flash-attn is CUDA-only and casts to bf16; the shim computes the same
  softmax attention in the input dtype (float32);
- the pipeline's cache allocators hard-code the 1.3B's 12 heads x 128 and 512 text tokens: the
  shim allocates the same dicts at the small config's sizes;
- the text encoder and the VAE (the pipeline's ``text_encoder`` / ``vae``): the prompt embedding
  is given, and the latents are compared before decoding.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from reactor_world.checkpoint import write_safetensors  # noqa: E402
from reactor_world.configs import config_named  # noqa: E402
from reactor_world.decoder import TinyDecoder  # noqa: E402
from reactor_world.model import CausalWanModel  # noqa: E402
from reactor_world.text import hashed_embedding  # noqa: E402

REFERENCE = "guandeh17/Self-Forcing"
REFERENCE_COMMIT = "33593df3e81fa3ec10239271dd2c100facac6de1"
CHUNKS = 5
WEIGHTS_SEED = 1234
NOISE_SEED = 99
DECODER_SEED = 7


def _stub(name: str, **attrs: object) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def _exact_attention(q, k, v, *args, **kwargs):  # noqa: ANN001, ARG001 - the reference's signature
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    s = torch.matmul(qt, kt.transpose(-2, -1)) * (1.0 / math.sqrt(qt.shape[-1]))
    return torch.matmul(torch.softmax(s, dim=-1), vt).transpose(1, 2).contiguous()


def _load(path: str, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_reference(root: str) -> dict[str, types.ModuleType]:
    class _Mixin(torch.nn.Module):
        pass

    _stub("diffusers")
    _stub("diffusers.configuration_utils", ConfigMixin=object, register_to_config=lambda f: f)
    _stub("diffusers.models")
    _stub("diffusers.models.modeling_utils", ModelMixin=_Mixin)
    _stub("einops", repeat=None, rearrange=None)
    _stub("tqdm")

    class _Bar(list):
        def update(self, *a: object) -> None: ...
        def close(self) -> None: ...

    _stub("tqdm.auto", tqdm=lambda it=(), **k: _Bar(it))
    if not hasattr(torch, "compile"):
        torch.compile = lambda f, **k: f  # type: ignore[attr-defined]
    try:
        importlib.import_module("torch.nn.attention.flex_attention")
    except ImportError:
        _stub("torch.nn.attention")
        _stub("torch.nn.attention.flex_attention", create_block_mask=None, flex_attention=None, BlockMask=object)
    for pkg in ("wan", "wan.modules", "utils", "pipeline", "demo_utils"):
        m = _stub(pkg)
        m.__path__ = [os.path.join(root, *pkg.split("."))]  # type: ignore[attr-defined]
    attn = _load(os.path.join(root, "wan/modules/attention.py"), "wan.modules.attention")
    attn.flash_attention = _exact_attention
    attn.attention = _exact_attention
    model = _load(os.path.join(root, "wan/modules/model.py"), "wan.modules.model")
    model.flash_attention = _exact_attention
    causal = _load(os.path.join(root, "wan/modules/causal_model.py"), "wan.modules.causal_model")
    causal.attention = _exact_attention
    sched = _load(os.path.join(root, "utils/scheduler.py"), "utils.scheduler")
    _stub("wan.modules.tokenizers", HuggingfaceTokenizer=None)
    _stub("wan.modules.vae", _video_vae=None)
    _stub("wan.modules.t5", umt5_xxl=None)
    wrapper = _load(os.path.join(root, "utils/wan_wrapper.py"), "utils.wan_wrapper")
    _stub("demo_utils.memory", gpu=None, get_cuda_free_memory_gb=None, DynamicSwapInstaller=None, move_model_to_device_with_memory_preservation=None)
    pipe = _load(os.path.join(root, "pipeline/causal_inference.py"), "pipeline.causal_inference")
    taehv = _load(os.path.join(root, "demo_utils/taehv.py"), "demo_utils.taehv")
    return {"causal": causal, "sched": sched, "wrapper": wrapper, "pipe": pipe, "taehv": taehv}


def sha(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        h.update(k.encode())
        h.update(tensors[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True, help="a checkout of guandeh17/Self-Forcing")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "test", "golden"))
    a = ap.parse_args()
    ref = load_reference(a.reference)
    torch.manual_seed(0)
    cfg = config_named("small")
    ours = CausalWanModel(cfg)
    ours.generate_weights(WEIGHTS_SEED)
    weights = {k: v.detach().clone() for k, v in ours.state_dict().items()}

    rm = ref["causal"].CausalWanModel(
        model_type="t2v", patch_size=cfg.patch_size, text_len=cfg.text_len, in_dim=cfg.in_dim, dim=cfg.dim, ffn_dim=cfg.ffn_dim,
        freq_dim=cfg.freq_dim, text_dim=cfg.text_dim, out_dim=cfg.out_dim, num_heads=cfg.num_heads, num_layers=cfg.num_layers,
        local_attn_size=cfg.window_frames, sink_size=cfg.sink_frames, qk_norm=cfg.qk_norm, cross_attn_norm=cfg.cross_attn_norm, eps=cfg.eps,
    )  # fmt: skip
    rm.load_state_dict(weights, strict=True)
    rm.eval().requires_grad_(False)

    W = ref["wrapper"].WanDiffusionWrapper
    gen = W.__new__(W)
    torch.nn.Module.__init__(gen)
    gen.model = rm
    gen.uniform_timestep = False
    gen.scheduler = ref["sched"].FlowMatchScheduler(shift=cfg.timestep_shift, sigma_min=0.0, extra_one_step=True)
    gen.scheduler.set_timesteps(1000, training=True)
    gen.seq_len = 32760
    gen.post_init()

    ft = cfg.frame_tokens
    prompt = hashed_embedding("a walk through a forest", cfg.text_dim, cfg.text_len).unsqueeze(0)
    g = torch.Generator().manual_seed(NOISE_SEED)
    noise = torch.randn([1, CHUNKS * cfg.chunk_frames, cfg.in_dim, cfg.latent_height, cfg.latent_width], generator=g)

    def caches():
        kv = [{"k": torch.zeros([1, cfg.cache_tokens, cfg.num_heads, cfg.head_dim]), "v": torch.zeros([1, cfg.cache_tokens, cfg.num_heads, cfg.head_dim]),
               "global_end_index": torch.tensor([0]), "local_end_index": torch.tensor([0])} for _ in range(cfg.num_layers)]  # fmt: skip
        cross = [{"k": None, "v": None, "is_init": False} for _ in range(cfg.num_layers)]
        return kv, cross

    # 1. One denoising pass: chunk 0 at t = 1000 on an empty cache.
    kv, cross = caches()
    t0 = torch.ones([1, cfg.chunk_frames]) * 1000.0
    with torch.no_grad():
        flow0, x0_0 = gen(noisy_image_or_video=noise[:, : cfg.chunk_frames], conditional_dict={"prompt_embeds": prompt}, timestep=t0,
                          kv_cache=kv, crossattn_cache=cross, current_start=0)  # fmt: skip

    # 2-3. The whole loop: five chunks through the reference pipeline, every re-noise draw recorded.
    P = ref["pipe"].CausalInferencePipeline
    p = P.__new__(P)
    torch.nn.Module.__init__(p)
    p.generator = gen
    p.text_encoder = lambda text_prompts: {"prompt_embeds": prompt}
    p.vae = types.SimpleNamespace(decode_to_pixel=lambda latent, use_cache=False: latent)
    p.scheduler = gen.get_scheduler()
    steps = torch.tensor(cfg.denoising_steps, dtype=torch.long)
    timesteps = torch.cat((p.scheduler.timesteps.cpu(), torch.tensor([0], dtype=torch.float32)))
    p.denoising_step_list = timesteps[1000 - steps]
    p.num_transformer_blocks = cfg.num_layers
    p.frame_seq_length = ft
    p.kv_cache1 = None
    p.args = types.SimpleNamespace(context_noise=cfg.context_noise)
    p.num_frame_per_block = cfg.chunk_frames
    p.independent_first_frame = False
    p.local_attn_size = cfg.window_frames
    rm.num_frame_per_block = cfg.chunk_frames

    def init_kv(batch_size, dtype, device):  # noqa: ARG001
        p.kv_cache1 = caches()[0]

    def init_cross(batch_size, dtype, device):  # noqa: ARG001
        p.crossattn_cache = caches()[1]

    p._initialize_kv_cache = init_kv
    p._initialize_crossattn_cache = init_cross
    draws: list[torch.Tensor] = []
    real_randn_like = torch.randn_like

    def recorded(t, **k):  # noqa: ANN001
        d = torch.randn(t.shape, generator=g, dtype=t.dtype)
        draws.append(d.clone())
        return d

    torch.randn_like = recorded  # type: ignore[assignment]
    import builtins

    quiet = builtins.print
    builtins.print = lambda *a, **k: None
    try:
        with torch.no_grad():
            _, latents = p.inference(noise, text_prompts=["x"], return_latents=True)
    finally:
        torch.randn_like = real_randn_like  # type: ignore[assignment]
        builtins.print = quiet

    # 4. The decoder: our seeded decoder weights (the TAEHV widths) loaded into the reference
    # TAEHV's decoder, which decodes the whole sequence frame by frame.
    ours_dec = TinyDecoder()
    ours_dec.generate_weights(DECODER_SEED)
    dec_sd = {k: v.detach().clone() for k, v in ours_dec.state_dict().items()}
    tae = ref["taehv"].TAEHV(checkpoint_path=None).eval()
    missing, unexpected = tae.load_state_dict(dec_sd, strict=False)
    assert not unexpected and all(k.startswith("encoder.") for k in missing), (missing, unexpected)
    dl = torch.randn([1, 6, 16, 2, 3], generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        frames_ref = tae.decode_video(dl, parallel=False)

    os.makedirs(a.out, exist_ok=True)
    out = {
        "prompt": prompt[0], "noise": noise, "draws": torch.stack(draws), "flow0": flow0, "x0_0": x0_0, "latents": latents,
        "decoder_latents": dl, "decoder_frames": frames_ref,
    }  # fmt: skip
    out.update({f"w.{k}": v for k, v in weights.items()})
    write_safetensors(os.path.join(a.out, "small.safetensors"), out)
    meta = {
        "reference": REFERENCE, "commit": REFERENCE_COMMIT, "config": "small", "chunks": CHUNKS, "torch": torch.__version__,
        "weights_seed": WEIGHTS_SEED, "noise_seed": NOISE_SEED, "decoder_seed": DECODER_SEED,
        "decoder_weights_sha256": sha(dec_sd), "dit_weights_sha256": sha(weights),
        "tolerance": {"rtol": 1e-4, "atol": 1e-5},
        "draws": len(draws),
    }  # fmt: skip
    with open(os.path.join(a.out, "small.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
