"""Checkpoints in the reference's key layout, read and checked key by key.

What loads (``checkpoint:`` in the app config):

- **Wan2.1-T2V** (``Wan-AI/Wan2.1-T2V-1.3B``'s ``diffusion_pytorch_model.safetensors``; the 14B's
  sharded ``diffusion_pytorch_model-0000N-of-0000M.safetensors`` with their ``.index.json``: give
  the folder or the index): keys as ``WanModel.state_dict()`` writes them
  (``blocks.0.self_attn.q.weight`` ...);
- **Self-Forcing** (``self_forcing_dmd.pt``) and CausVid-style training checkpoints: a
  ``torch.save`` dict whose ``generator`` (or ``generator_ema``, with ``checkpoint_key``) holds the
  wrapper's state dict, every key under ``model.``;
- any ``.safetensors`` / ``.pt`` of the same keys; the prefixes ``model.``, ``module.``,
  ``_orig_mod.`` and ``_fsdp_wrapped_module.`` are taken off.

safetensors is read here (an 8-byte header length, a JSON header, the raw tensors; no package
needed, since PyPI cannot be reached from these machines): a file shorter than its header says is
named as truncated. Every key the model needs must be present with its shape; a key it does not
know is refused too (a checkpoint of another model would otherwise load half-way).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Mapping

import numpy as np
import torch

__all__ = ["CheckpointError", "read_checkpoint", "read_safetensors", "write_safetensors", "check_state_dict"]

_PREFIXES = ("_fsdp_wrapped_module.", "_orig_mod.", "module.", "model.")

_DTYPES = {
    "F64": (np.float64, torch.float64),
    "F32": (np.float32, torch.float32),
    "F16": (np.float16, torch.float16),
    "BF16": (None, torch.bfloat16),
    "I64": (np.int64, torch.int64),
    "I32": (np.int32, torch.int32),
    "I16": (np.int16, torch.int16),
    "I8": (np.int8, torch.int8),
    "U8": (np.uint8, torch.uint8),
    "BOOL": (np.bool_, torch.bool),
}


class CheckpointError(ValueError):
    """A checkpoint that cannot be this model's (code ``world_checkpoint_invalid``): the message names the key and the fix."""

    code = "world_checkpoint_invalid"


def _bf16_from_bytes(raw: bytes, shape: list[int]) -> torch.Tensor:
    u16 = np.frombuffer(raw, dtype=np.uint16).astype(np.int32) << 16
    return torch.from_numpy(u16.view(np.float32).copy()).reshape(shape).to(torch.bfloat16)


def read_safetensors(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of one ``.safetensors`` file (CPU, the file's dtypes)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: truncated: {size} bytes, not even a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise CheckpointError(f"{path}: truncated: its header says {n} bytes of JSON, the file has {size - 8} after the length")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise CheckpointError(f"{path}: not a safetensors file (its header is not JSON: {e})") from e
        base = 8 + n
        out: dict[str, torch.Tensor] = {}
        end_max = 0
        for key, info in header.items():
            if key == "__metadata__":
                continue
            dtype = info.get("dtype")
            if dtype not in _DTYPES:
                raise CheckpointError(f"{path}: tensor {key!r} has dtype {dtype!r}, which this reader does not know")
            start, end = info["data_offsets"]
            end_max = max(end_max, end)
            if base + end > size:
                raise CheckpointError(
                    f"{path}: truncated: tensor {key!r} ends at byte {base + end}, the file has {size}; download it again"
                )
            f.seek(base + start)
            raw = f.read(end - start)
            np_dtype, torch_dtype = _DTYPES[dtype]
            shape = list(info["shape"])
            if np_dtype is None:
                t = _bf16_from_bytes(raw, shape)
            else:
                t = torch.from_numpy(np.frombuffer(raw, dtype=np_dtype).copy()).reshape(shape)
            out[key] = t
    return out


def write_safetensors(path: str, tensors: Mapping[str, torch.Tensor]) -> None:
    """Writes ``tensors`` as a safetensors file (tests make checkpoints with it; float32/16, bf16)."""
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64", torch.int64: "I64", torch.uint8: "U8"}
    header: dict[str, Any] = {}
    blobs = []
    offset = 0
    for key, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            raw = (t.float().numpy().view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            raw = t.numpy().tobytes()
        header[key] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def _strip(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if key.startswith(p):
                key, changed = key[len(p) :], True
    return key


def read_checkpoint(path: str, key: str | None = None) -> dict[str, torch.Tensor]:
    """A checkpoint file or folder -> its state dict with the reference's key names."""
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path} does not exist; set the app config's checkpoint to a .safetensors or .pt file (or leave it out for generated weights)")
    files: list[str]
    if os.path.isdir(path):
        index = [f for f in sorted(os.listdir(path)) if f.endswith(".safetensors.index.json")]
        if index:
            path = os.path.join(path, index[0])
        else:
            files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
            if not files:
                raise CheckpointError(f"checkpoint folder {path} holds no .safetensors file")
    if os.path.isdir(path):
        pass
    elif path.endswith(".index.json"):
        with open(path) as f:
            weight_map = json.load(f).get("weight_map", {})
        folder = os.path.dirname(path)
        files = [os.path.join(folder, n) for n in sorted(set(weight_map.values()))]
    else:
        files = [path]
    raw: dict[str, torch.Tensor] = {}
    for file in files:
        if file.endswith(".safetensors"):
            raw.update(read_safetensors(file))
        else:
            raw.update(_read_torch(file, key))
    return {_strip(k): v for k, v in raw.items()}


def _read_torch(path: str, key: str | None) -> dict[str, torch.Tensor]:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a bad file
        raise CheckpointError(f"{path}: cannot be read as a torch checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:200]}); is it truncated?") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    if key is not None:
        if key not in obj:
            raise CheckpointError(f"{path}: has no {key!r} entry (it has {', '.join(map(str, list(obj)[:8]))})")
        obj = obj[key]
    elif "generator" in obj and isinstance(obj["generator"], dict):
        obj = obj["generator"]  # Self-Forcing / CausVid: the generator's weights (checkpoint_key: generator_ema for the EMA)
    elif "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    bad = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path}: entry {bad[0]!r} is not a tensor; name the state dict inside with checkpoint_key")
    return obj


def _guess(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor]) -> str:
    """What a checkpoint seems to be, from its patch embedding (nothing when it is the model's own width)."""
    pe = got.get("patch_embedding.weight")
    mine = want.get("patch_embedding.weight")
    if pe is None or pe.dim() != 5 or (mine is not None and tuple(pe.shape) == tuple(mine.shape)):
        return ""
    dim, in_dim = pe.shape[0], pe.shape[1]
    names = {1536: "Wan2.1 1.3B (model: wan-1.3b)", 5120: "Wan2.1 14B (model: wan-14b)"}
    what = names.get(dim, f"a DiT of width {dim}")
    if in_dim != 16:
        what += f" with {in_dim} input channels (an image-to-video model? this app is text-to-video)"
    return f"; it looks like {what}"


def check_state_dict(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor], where: str, model: str) -> None:
    """Raises :class:`CheckpointError` for a missing, unknown or misshapen key, naming it."""
    missing = [k for k in want if k not in got]
    unknown = [k for k in got if k not in want]
    hint = _guess(got, want)
    if missing and len(missing) == len(want):
        raise CheckpointError(f"{where}: none of the {len(want)} keys of the {model} is in it (it has e.g. {', '.join(list(got)[:3])}){hint}; is it the right checkpoint?")
    if missing:
        raise CheckpointError(f"{where}: missing key {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "") + f" of the {model}{hint}")
    for k, v in want.items():
        if tuple(got[k].shape) != tuple(v.shape):
            raise CheckpointError(f"{where}: key {k!r} has shape {list(got[k].shape)}, the {model} needs {list(v.shape)}{hint}")
    if unknown:
        raise CheckpointError(f"{where}: unexpected key {unknown[0]!r}" + (f" and {len(unknown) - 1} more" if len(unknown) > 1 else "") + f", which the {model} does not have{hint}")
