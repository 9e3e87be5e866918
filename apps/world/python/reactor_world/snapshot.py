"""A ``WorldSession``'s state as a snapshot (docs/snapshots.md): ``state_dict`` / ``load_state_dict``.

What a session is, besides the weights: each block's KV cache (only the tokens in use, with its
two indices), the decoder's memory, the clean latents kept for a re-cache, the prompt and the
counters. The prompt's embedding and the cross-attention caches are not kept: they follow from
the prompt and are computed again on restore (the next call).

Tensors leave as CPU arrays: bfloat16 and float16, which have no TypeScript typed array, as
their bits (``int16``), so a restore is bit-exact. Each tensor goes as ``{dtype, shape, data}``
(arrays arrive back flat). A snapshot restores only into a session of the same model config
(``config`` is checked): another resolution or window has other shapes.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Optional

import numpy as np
import torch

from .pipeline import WorldSession

__all__ = ["session_state", "load_session_state", "SnapshotMismatch"]

_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16}
_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8)}


class SnapshotMismatch(ValueError):
    """The snapshot is of another model config (code ``snapshot_version_mismatch``)."""

    code = "snapshot_version_mismatch"


def _pack(t: torch.Tensor) -> dict[str, Any]:
    t = t.detach().contiguous()
    bits = _BITS.get(t.dtype)
    # A copy always (on CPU, .cpu() would alias the cache, which the next chunk overwrites).
    data = (t.view(bits) if bits is not None else t).to("cpu", copy=True)
    return {"dtype": str(t.dtype), "shape": list(t.shape), "data": data}


def _unpack(d: dict[str, Any], device: torch.device) -> torch.Tensor:
    dtype = _DTYPES[d["dtype"]]
    data = torch.as_tensor(np.asarray(d["data"]))
    bits = _BITS.get(dtype)
    t = data.view(dtype) if bits is not None else data.to(dtype)
    return t.reshape([int(n) for n in d["shape"]]).to(device, copy=True)


def _config_key(s: WorldSession) -> dict[str, Any]:
    c = s.cfg
    return {"name": c.name, "width": c.width, "height": c.height, "window": c.window_frames, "sink": c.sink_frames, "layers": c.num_layers, "batch": s.batch, "dtype": str(s.dtype)}


def session_state(s: WorldSession) -> dict[str, Any]:
    """The session's state: CPU arrays and plain data."""
    return {
        "config": _config_key(s),
        "caches": [{"k": _pack(c.k[:, : c.local_end]), "v": _pack(c.v[:, : c.local_end]), "local": c.local_end, "global": c.global_end} for c in s.caches],
        "decoder": {"last": [[int(i), _pack(t)] for i, t in s.decoder_state.last.items()], "framesOut": s.decoder_state.frames_out},
        "kept": [[int(start), _pack(lat)] for start, lat in s.kept],
        "first": None if s.first is None else [int(s.first[0]), _pack(s.first[1])],
        "prompt": s.prompt,
        "chunk": s.chunk,
        "frame": s.frame,
    }


def load_session_state(s: WorldSession, d: dict[str, Any]) -> None:
    """Puts back what :func:`session_state` returned; refuses another config before changing anything."""
    key = _config_key(s)
    if d.get("config") != key:
        raise SnapshotMismatch(f"the snapshot is of world config {d.get('config')}, this session's is {key}: restore it into the same model, size and window")
    dev = s.device
    for c, saved in zip(s.caches, d["caches"]):
        n = int(saved["local"])
        c.clear()
        if n:
            c.k[:, :n] = _unpack(saved["k"], dev)
            c.v[:, :n] = _unpack(saved["v"], dev)
        c.local_end, c.global_end = n, int(saved["global"])
    s.decoder_state.clear()
    s.decoder_state.last.update({int(i): _unpack(t, dev) for i, t in d["decoder"]["last"]})
    s.decoder_state.frames_out = int(d["decoder"]["framesOut"])
    s.kept = deque((int(start), _unpack(t, dev)) for start, t in d["kept"])
    first: Optional[list] = d["first"]
    s.first = None if first is None else (int(first[0]), _unpack(first[1], dev))
    for x in s.cross:
        x.clear()
    # The prompt's embedding follows from the prompt: computed again here (no re-cache: the cache is the snapshot's).
    s.prompt, s.context = None, None
    s.chunk, s.frame = int(d["chunk"]), int(d["frame"])
    if d["prompt"] is not None:
        s.prompt = d["prompt"]
        s.context = s.model.embed_text(s.text(s.prompt).to(s.dtype).expand(s.batch, -1, -1))
