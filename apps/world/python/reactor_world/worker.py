"""``WorldWorker``: the world app's model half, one Python rank of its ``DistributedRunner``.

``load()`` builds the causal DiT of the chosen config on the rank's device (bf16 on CUDA, float32
on CPU), fills it from the checkpoint or from a seed, builds the decoder and the prompt encoder,
and runs one chunk as a warm-up (kernels chosen, ``torch.compile`` traced when asked), reporting
each stage as load progress. ``generate()`` makes the session's next chunk; ``reset()`` clears the
KV cache. The runner keeps this object between calls, so the cache *is* the session's state.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any, Optional

import numpy as np
import torch

from reactor_worker import DistributedWorker, init_distributed

from .checkpoint import CheckpointError, check_state_dict, read_checkpoint
from .configs import ConfigError, ModelConfig, config_named
from .decoder import TinyDecoder, to_uint8
from .model import CausalWanModel
from .pipeline import WorldSession
from .snapshot import load_session_state, session_state
from .text import PromptEncoder, TextEncoderError

__all__ = ["WorldWorker", "WorldError", "WorldInputInvalid", "WorldOutOfMemory", "CheckpointError", "ConfigError", "TextEncoderError"]

MAX_SEED = 2**31 - 1
QUALITY_STEPS = {"full": None, "fast": (1000, 500)}
#: The pipeline shapes over ranks (``staged.py``, imported only for a pipeline: it needs reactor_worker.pipeline).
PIPELINE_SHAPES = ("blocks", "steps")


class WorldError(RuntimeError):
    code = "world_error"


class WorldInputInvalid(WorldError):
    """A ``generate()`` input the model cannot take (code ``world_input_invalid``)."""

    code = "world_input_invalid"


class WorldOutOfMemory(WorldError):
    """CUDA ran out of memory (code ``world_out_of_memory``): the message gives the sizes and what to lower."""

    code = "world_out_of_memory"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def _device_of(spec: str) -> torch.device:
    if spec.startswith("cuda") or spec.startswith("gpu"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"this rank was given {spec} but torch {torch.__version__} sees no CUDA device; run on CPU with devices: cpu")
        return torch.device("cuda", 0)
    return torch.device("cpu")


class WorldWorker(DistributedWorker):
    """One rank of the world model: alone (``pipeline="none"``), or a stage of a pipeline over the
    runner's ranks (``"blocks"``: the DiT's blocks split; ``"steps"``: the denoising steps split;
    ``staged.py``), whose last rank is the runner's ``outputRank``."""

    def load(
        self,
        model: str = "small",
        checkpoint: Optional[str] = None,
        checkpoint_key: Optional[str] = None,
        decoder_checkpoint: Optional[str] = None,
        dtype: str = "auto",
        overrides: Optional[dict[str, Any]] = None,
        text_encoder: Optional[str] = None,
        weights_seed: int = 0,
        compile: str = "auto",  # noqa: A002 - the config's name
        warmup: bool = True,
        threads: Optional[int] = None,
        pipeline: str = "none",
        dist_backend: str = "auto",
        share_gpu: Optional[int] = None,
        **_ignored: Any,
    ) -> None:
        t_start = time.perf_counter()
        if share_gpu is not None:
            # Bench only (scripts/gpu/world-pipeline.mjs): the runner gives each rank its own GPU, so
            # two stages on one GPU are CPU ranks that take that GPU before CUDA starts.
            os.environ["CUDA_VISIBLE_DEVICES"] = str(share_gpu)
            self.device = "cuda:0"
        if dist_backend not in ("auto", "gloo", "nccl"):
            raise ConfigError(f"dist_backend {dist_backend!r} is not one of auto, gloo, nccl")
        self.dist_backend = None if dist_backend == "auto" else dist_backend
        if pipeline not in ("none", *PIPELINE_SHAPES):
            raise ConfigError(f"pipeline {pipeline!r} is not one of none, {', '.join(PIPELINE_SHAPES)}")
        if self.world_size != 1 and pipeline == "none":
            raise ConfigError(
                f"the world model runs on one rank unless it is a pipeline (world size {self.world_size} given); set worldSize: 1, or pipeline: blocks or steps"
            )
        if self.world_size > 1 and getattr(self, "output_rank", 0) != self.world_size - 1:
            raise ConfigError(
                f"a pipeline's frames come from its last stage: set the runner's outputRank to {self.world_size - 1} (it is {getattr(self, 'output_rank', 0)})"
            )
        self.pipeline = pipeline if self.world_size > 1 else "none"
        self.cfg: ModelConfig = config_named(model, **(overrides or {}))
        self.torch_device = _device_of(str(self.device))
        cuda = self.torch_device.type == "cuda"
        if cuda:
            torch.cuda.set_device(self.torch_device)
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cudnn.benchmark = True
        elif threads:
            torch.set_num_threads(threads)
        names = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
        if dtype != "auto" and dtype not in names:
            raise ConfigError(f"dtype {dtype!r} is not one of auto, bf16, fp16, fp32")
        self.dtype = names.get(dtype, torch.bfloat16 if cuda else torch.float32)
        self.report_progress(0.02, f"building {self.cfg.name} ({_count(self.cfg.parameters())} parameters)")
        self.model = self._build(cuda)
        self.weights: dict[str, Any]
        if checkpoint:
            self.report_progress(0.05, f"reading {os.path.basename(checkpoint)}")
            sd = read_checkpoint(checkpoint, checkpoint_key)
            want = self.model.state_dict()
            check_state_dict(sd, want, checkpoint, f"{self.cfg.name} DiT")
            self.report_progress(0.5, "copying weights to the device")
            self.model.load_state_dict(sd)
            del sd
            self.weights = {"kind": "checkpoint", "source": checkpoint}
        else:
            self.model.generate_weights(weights_seed, lambda r: self.report_progress(0.05 + 0.5 * r, "generating weights"))
            self.weights = {"kind": "generated", "source": f"seed {weights_seed}"}
        self.model.eval().requires_grad_(False)
        self.decoder = TinyDecoder(self.cfg.decoder_channels).to(self.torch_device, torch.float16 if cuda else torch.float32)
        if decoder_checkpoint:
            self.decoder.load_taehv(read_checkpoint(decoder_checkpoint), decoder_checkpoint)
            self.weights["decoder"] = decoder_checkpoint
        else:
            self.decoder.generate_weights(weights_seed + 1)
            self.weights["decoder"] = "generated"
        self.decoder.eval().requires_grad_(False)
        self.text = PromptEncoder(self.cfg.text_dim, self.cfg.text_len, self.torch_device, self.dtype, text_encoder)
        self.session = self._session()
        if self.pipeline == "none":
            # An urgent change cancels the call: stop between DiT passes (a pipeline's stages would
            # have to stop together, so they finish the chunk).
            self.session.should_stop = lambda: self.signal.aborted
        self.compiled = "off"
        if compile != "off":
            self.compiled = self._compile(compile == "on" or (compile == "auto" and cuda))
        if warmup:
            # One chunk picks the kernels (and traces a compiled model), so the first frame a
            # viewer waits for costs what every other chunk costs.
            self.report_progress(0.85, "warming up (two chunks)")
            try:
                self._warm_up()
            except Exception as e:  # noqa: BLE001 - a compile fails while tracing, not when asked
                if not self.model.compiled:
                    raise
                print(f"warning: torch.compile failed while tracing ({type(e).__name__}: {str(e).splitlines()[0][:200]}); running eager", flush=True)
                self.model.uncompile_blocks()
                self.compiled = f"off (compile failed: {type(e).__name__})"
                self._warm_up()
        self.load_ms = (time.perf_counter() - t_start) * 1000
        self.report_progress(1.0, "ready")
        if self.is_leader:
            print(
                f"world model {self.cfg.name}: {_count(self.cfg.parameters())} parameters, {self.weights['kind']} weights ({self.weights['source']}), "
                f"{self.cfg.width}x{self.cfg.height}, {self.cfg.chunk_frames} latent frames a chunk, KV cache {self.cfg.window_frames} frames "
                f"({self.session.cache_bytes / 2**20:.0f} MiB), {str(self.dtype).replace('torch.', '')} on {self._adapter()}, compile {self.compiled}; "
                f"loaded in {self.load_ms:.0f} ms",
                flush=True,
            )

    @property
    def _answers(self) -> bool:
        """This rank's result is the runner's answer (``output_rank``; a reactor_worker before issue 39 has none: rank 0)."""
        return self.rank == getattr(self, "output_rank", 0)

    def _session(self) -> WorldSession:
        args = (self.decoder, self.text, self.cfg, self.torch_device, self.dtype)
        if self.pipeline == "none":
            return WorldSession(self.model, *args)
        from .staged import BlockStages, StepStagesSession

        init_distributed(self.dist_backend)
        if self.pipeline == "steps":
            return StepStagesSession(self.model, *args, rank=self.rank, world_size=self.world_size)
        session = WorldSession(BlockStages(self.model, self.rank, self.world_size, self.torch_device), *args)  # type: ignore[arg-type]
        session.decodes = self._answers
        return session

    def _warm_up(self) -> None:
        self.session.reset()
        self.session.step("warm-up", 0, self.cfg.denoising_steps)
        self.session.step("warm-up", 0, self.cfg.denoising_steps)
        self.session.reset()

    def _build(self, cuda: bool) -> CausalWanModel:
        meta = hasattr(torch.nn.Module, "to_empty") and hasattr(torch, "device") and cuda and hasattr(torch.device, "__enter__")
        if meta:
            # Built without memory, then allocated on the GPU: no 5-57 GB host copy to initialise.
            with torch.device("meta"):
                m = CausalWanModel(self.cfg)
            m = m.to_empty(device=self.torch_device)
        else:
            m = CausalWanModel(self.cfg).to(self.torch_device)
        return m.to(self.dtype)

    def _compile(self, want: bool) -> str:
        if not want:
            return "off"
        if not hasattr(torch, "compile"):
            print(f"warning: compile asked for, but torch {torch.__version__} has no torch.compile; running eager", flush=True)
            return "off (no torch.compile)"
        try:
            self.report_progress(0.8, "compiling the DiT blocks (torch.compile; traced by the warm-up chunks)")
            self.model.compile_blocks()
            return "torch.compile (blocks)"
        except Exception as e:  # noqa: BLE001 - any compiler failure falls back, said
            print(f"warning: torch.compile failed ({type(e).__name__}: {e}); running eager", flush=True)
            return f"off ({type(e).__name__})"

    def _adapter(self) -> str:
        if self.torch_device.type == "cuda":
            return torch.cuda.get_device_name(self.torch_device)
        return f"CPU ({torch.get_num_threads()} threads)"

    def _steps(self, inp: dict[str, Any]) -> tuple[int, ...]:
        quality = inp.get("quality", "full")
        if quality not in QUALITY_STEPS:
            raise WorldInputInvalid(f"quality {quality!r} is not one of {', '.join(QUALITY_STEPS)}")
        return QUALITY_STEPS[quality] or self.cfg.denoising_steps

    def generate(self, inp: dict[str, Any]) -> dict[str, Any]:
        prompt, seed = inp.get("prompt"), inp.get("seed", 0)
        if not isinstance(prompt, str):
            raise WorldInputInvalid(f"prompt must be a string, got {type(prompt).__name__}")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
            raise WorldInputInvalid(f"seed must be an integer in 0..{MAX_SEED}, got {seed!r}")
        steps = self._steps(inp)
        t0 = time.perf_counter()
        try:
            out = self.session.step(prompt, seed, steps)
            if not self._answers:
                # A stage before the last: its part is done, the last stage answers.
                return {"stage": self.rank, "chunk": out.index}
            frames = out.frames
            n, _, h, w = frames.shape
            result = self.result_array((n, h, w, 3), np.uint8)
            torch.from_numpy(result).copy_(to_uint8(frames).cpu())
        except torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else MemoryError as e:  # type: ignore[misc]
            free, total = torch.cuda.mem_get_info(self.torch_device) if self.torch_device.type == "cuda" else (0, 0)
            raise WorldOutOfMemory(
                f"CUDA ran out of memory generating chunk {self.session.chunk} of {self.cfg.name} at {self.cfg.width}x{self.cfg.height} "
                f"({free / 2**30:.1f} of {total / 2**30:.1f} GiB free; KV cache {self.session.cache_bytes / 2**30:.2f} GiB): lower window_frames, "
                f"the resolution, or use wan-1.3b; the runner is rebuilt for the next session ({str(e).splitlines()[0][:160]})"
            ) from None
        total_ms = (time.perf_counter() - t0) * 1000
        mem = torch.cuda.max_memory_allocated(self.torch_device) if self.torch_device.type == "cuda" else 0
        return {
            "frames": result,
            "n": int(n),
            "width": int(w),
            "height": int(h),
            "chunk": out.index,
            "startFrame": out.start_frame,
            "recached": out.recached,
            # What the chunk is, in 16 hex digits: the same seed, prompts and weights give the same
            # hash (a replay, a fresh session) on every run of one device kind.
            "latentHash": hashlib.sha256(out.latents.float().cpu().numpy().tobytes()).hexdigest()[:16],
            "steps": len(steps),
            "timings": {**out.timings, "totalMs": total_ms},
            "cacheFrames": min(self.session.frame, self.cfg.window_frames),
            "cacheBytes": self.session.cache_bytes,
            "gpuPeakBytes": int(mem),
            "weights": self.weights,
            "model": self.cfg.name,
            "compiled": self.compiled,
        }

    def reset(self) -> None:
        """A new rollout: the KV cache and the decoder's memory are cleared; the weights stay."""
        self.session.reset()

    def snapshot(self) -> dict[str, Any]:
        """The session's state (KV cache, decoder memory, prompt, counters) as host arrays (docs/snapshots.md)."""
        return session_state(self.session)

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Puts back a :meth:`snapshot`; another model config is refused before anything changes."""
        load_session_state(self.session, snapshot)
