"""The model configurations: Wan2.1's T2V DiT at its two published sizes, and a small one.

``wan-1.3b`` and ``wan-14b`` are Wan2.1-T2V-1.3B and -14B as Self-Forcing, CausVid and LongLive
use them (the numbers are the checkpoints' own ``config.json``: dim, FFN, heads, blocks, the
16-channel latent, the 4096-wide umT5 text embedding of 512 tokens). ``small`` runs the same
code at a size a CPU test can afford. Every size is a field, so a user's own config (a
checkpoint of another width) is one ``dataclasses.replace`` away.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["ModelConfig", "CONFIGS", "config_named", "ConfigError"]


class ConfigError(ValueError):
    """A model config that cannot run (code ``world_config_invalid``): names the field and the fix."""

    code = "world_config_invalid"


@dataclass(frozen=True)
class ModelConfig:
    """One causal Wan DiT and how it generates.

    Sizes (``dim`` .. ``text_len``) are the checkpoint's; the rest is how a session runs it:
    ``height``/``width`` in pixels (the VAE's 8x over the latent, whose 2x2 patches are the
    tokens), ``chunk_frames`` latent frames per call (3 = 12 video frames), ``window_frames``
    latent frames of KV cache the attention reads (the current chunk included; LongLive's
    ``local_attn_size``), of which ``sink_frames`` first frames stay for the whole session.
    """

    name: str
    dim: int
    ffn_dim: int
    num_heads: int
    num_layers: int
    in_dim: int = 16
    out_dim: int = 16
    freq_dim: int = 256
    text_dim: int = 4096
    text_len: int = 512
    patch_size: tuple[int, int, int] = (1, 2, 2)
    qk_norm: bool = True
    cross_attn_norm: bool = True
    eps: float = 1e-6
    height: int = 480
    width: int = 832
    chunk_frames: int = 3
    window_frames: int = 12
    sink_frames: int = 3
    #: Self-Forcing's 4 steps (``denoising_step_list``), warped onto the shifted schedule.
    denoising_steps: tuple[int, ...] = (1000, 750, 500, 250)
    timestep_shift: float = 5.0
    #: The timestep of the pass that writes a finished chunk into the cache (``context_noise``).
    context_noise: int = 0
    #: The VAE's spatial factor (pixels per latent cell) and the decoder's widths.
    vae_stride: int = 8
    decoder_channels: tuple[int, int, int, int] = (256, 128, 64, 64)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def latent_height(self) -> int:
        return self.height // self.vae_stride

    @property
    def latent_width(self) -> int:
        return self.width // self.vae_stride

    @property
    def frame_tokens(self) -> int:
        """Tokens per latent frame (1,560 at 832x480)."""
        return (self.latent_height // self.patch_size[1]) * (self.latent_width // self.patch_size[2])

    @property
    def chunk_tokens(self) -> int:
        return self.chunk_frames * self.frame_tokens

    @property
    def cache_tokens(self) -> int:
        return self.window_frames * self.frame_tokens

    def parameters(self) -> int:
        """Parameters of the DiT (not the decoder), for load progress and memory estimates."""
        d, f, t = self.dim, self.ffn_dim, self.text_dim
        p = self.patch_size[0] * self.patch_size[1] * self.patch_size[2]
        block = 8 * (d * d + d) + 4 * d + 2 * d + (d * f + f + f * d + d) + 6 * d
        return (self.in_dim * p * d + d) + (t * d + d + d * d + d) + (self.freq_dim * d + d + d * d + d) + (d * 6 * d + 6 * d) + self.num_layers * block + (d * p * self.out_dim + p * self.out_dim + 2 * d)

    def check(self) -> "ModelConfig":
        """Raises :class:`ConfigError` naming the first field that cannot work."""
        cell = self.vae_stride * self.patch_size[1]
        if self.height % cell or self.width % cell:
            raise ConfigError(
                f"{self.name}: {self.width}x{self.height} is not a multiple of {cell} pixels (the VAE's {self.vae_stride}x "
                f"times the {self.patch_size[1]}x{self.patch_size[2]} patch); use e.g. "
                f"{self.width // cell * cell}x{self.height // cell * cell}"
            )
        if self.height < cell or self.width < cell:
            raise ConfigError(f"{self.name}: {self.width}x{self.height} is smaller than one {cell}-pixel patch")
        if self.dim % self.num_heads or (self.head_dim % 2):
            raise ConfigError(f"{self.name}: dim {self.dim} must split into {self.num_heads} heads of an even width")
        if self.chunk_frames < 1:
            raise ConfigError(f"{self.name}: chunk_frames must be at least 1, got {self.chunk_frames}")
        if self.window_frames < self.chunk_frames + self.sink_frames:
            raise ConfigError(
                f"{self.name}: window_frames ({self.window_frames}) must hold the sink ({self.sink_frames}) and one chunk "
                f"({self.chunk_frames}); raise window_frames to at least {self.chunk_frames + self.sink_frames}"
            )
        if not self.denoising_steps or any(not 0 < s <= 1000 for s in self.denoising_steps):
            raise ConfigError(f"{self.name}: denoising_steps must be timesteps in 1..1000, got {list(self.denoising_steps)}")
        return self


CONFIGS: dict[str, ModelConfig] = {
    "wan-1.3b": ModelConfig(name="wan-1.3b", dim=1536, ffn_dim=8960, num_heads=12, num_layers=30),
    "wan-14b": ModelConfig(name="wan-14b", dim=5120, ffn_dim=13824, num_heads=40, num_layers=40),
    # The same code at a CPU test's size: 64x48 pixels (8x6 latent, 12 tokens a frame), 2 blocks.
    "small": ModelConfig(
        name="small",
        dim=48,
        ffn_dim=96,
        num_heads=4,
        num_layers=2,
        freq_dim=32,
        text_dim=24,
        text_len=16,
        height=48,
        width=64,
        window_frames=9,
        sink_frames=3,
        decoder_channels=(16, 12, 8, 8),
    ),
}


def config_named(name: str, **overrides: Any) -> ModelConfig:
    """The config ``name`` with ``overrides`` (None values ignored), checked."""
    base = CONFIGS.get(name)
    if base is None:
        raise ConfigError(f"unknown model config {name!r}; known: {', '.join(CONFIGS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = [k for k in given if k not in ModelConfig.__dataclass_fields__]
    if unknown:
        raise ConfigError(f"{name}: unknown config field(s) {', '.join(unknown)}")
    for k in ("denoising_steps", "patch_size", "decoder_channels"):
        if k in given:
            given[k] = tuple(given[k])
    return replace(base, **given).check()
