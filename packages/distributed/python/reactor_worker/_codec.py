"""Values between a Python rank and the TypeScript parent: the json format of
``packages/distributed/src/shm/codec.ts``.

The structure travels as JSON text in the IPC message, each array replaced by a placeholder
``{"\\u0000ta": <index>}``; ``m`` holds ``[type, offset, length]`` per array (type: the wire index
of the TypeScript typed array, offset: 64-byte aligned from the block start, length: elements, or
bytes for Buffer/DataView). The arrays' bytes lie in a shared-memory block. (TypeScript's v8
format, for values JSON cannot carry, has no Python reader: the parent refuses such inputs for
Python ranks.)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from pathlib import PurePath
from typing import Any, List, Optional

import numpy as np

from . import UnsendableValueError

PLACEHOLDER = "\x00ta"
ALIGN = 64
MAX_DEPTH = 64
BUFFER_TYPE = 12
DATA_VIEW_TYPE = 11

# Wire type index -> NumPy dtype (codec.ts VIEW_TYPES order; Uint8Clamped, DataView, Buffer -> uint8).
_WIRE_DTYPES = [
    np.dtype("<i1"),
    np.dtype("<u1"),
    np.dtype("<u1"),
    np.dtype("<i2"),
    np.dtype("<u2"),
    np.dtype("<i4"),
    np.dtype("<u4"),
    np.dtype("<f4"),
    np.dtype("<f8"),
    np.dtype("<i8"),
    np.dtype("<u8"),
    np.dtype("<u1"),
    np.dtype("<u1"),
]
_TYPE_OF = {
    np.dtype("<i1"): 0,
    np.dtype("<u1"): 1,
    np.dtype("<i2"): 3,
    np.dtype("<u2"): 4,
    np.dtype("<i4"): 5,
    np.dtype("<u4"): 6,
    np.dtype("<f4"): 7,
    np.dtype("<f8"): 8,
    np.dtype("<i8"): 9,
    np.dtype("<u8"): 10,
}
# What a float16/bfloat16 result becomes, as the app declared it (pythonWorker(..., { halfPrecision })):
# "float32" (the same values), "uint8" (frames in [0, 1] as RGB bytes), or None (refused).
HALF_PRECISION = os.environ.get("REACTOR_HALF_PRECISION") or None
_DECLARE = "or declare pythonWorker(..., { halfPrecision: 'float32' }) (or 'uint8' for frames in [0, 1]) and the rank converts"

_DTYPE_FIX = {
    "b": "bool arrays have no TypeScript typed array: send arr.astype(np.uint8)",
    "f2": f"float16 has no TypeScript typed array: send arr.astype(np.float32), frames as (arr.clip(0, 1) * 255).astype(np.uint8) (or arr.view(np.uint16) and decode it yourself), {_DECLARE}",
    "c": "complex arrays have no TypeScript typed array: send the real and imaginary parts as two float arrays",
    "O": "object arrays cannot travel: send a list, or an array of a numeric dtype",
}


def _half_np(a: np.ndarray) -> np.ndarray:
    """A float16 array as the app declared it travels (a new array)."""
    f = a.astype(np.float32)
    if HALF_PRECISION == "uint8":
        return np.rint(np.clip(f, 0.0, 1.0) * 255.0).astype(np.uint8)
    return f


def _half_torch(v: Any) -> Any:
    """A float16/bfloat16 CPU tensor as the app declared it travels (a new tensor)."""
    f = v.float()
    if HALF_PRECISION == "uint8":
        import torch

        return f.clamp_(0.0, 1.0).mul_(255.0).round_().to(torch.uint8)
    return f


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Encoded:
    """A value ready to send: JSON text, the arrays' metadata, and the arrays (1-D uint8 views) with their offsets."""

    __slots__ = ("json", "meta", "arrays", "offsets", "total")

    def __init__(self, text: str, meta: List[int], arrays: List[np.ndarray], offsets: List[int], total: int) -> None:
        self.json = text
        self.meta = meta
        self.arrays = arrays
        self.offsets = offsets
        self.total = total

    def set_offset(self, i: int, offset: int) -> None:
        self.offsets[i] = offset
        self.meta[i * 3 + 1] = offset


def _torch_tensor(v: Any) -> bool:
    mod = type(v).__module__
    return mod.startswith("torch") and type(v).__name__ in ("Tensor", "Parameter")


def encode(value: Any, what: str = "result") -> Encoded:
    """Encodes ``value`` without copying its arrays (:func:`write` copies them once, into shared memory).

    :raises UnsendableValueError: naming the field (``result.frames[2]``) and the fix
    """
    arrays: List[np.ndarray] = []
    meta: List[int] = []
    offsets: List[int] = []
    index: dict = {}
    cursor = 0

    def add(arr: np.ndarray, type_index: int, length: int, keep: Any) -> dict:
        nonlocal cursor
        key = id(keep)
        hit = index.get(key)
        if hit is not None and hit[1] is keep:
            return {PLACEHOLDER: hit[0]}
        i = len(arrays)
        index[key] = (i, keep)
        arrays.append(arr)
        offsets.append(cursor)
        meta.extend((type_index, cursor, length))
        cursor = align(cursor + arr.nbytes)
        return {PLACEHOLDER: i}

    def ndarray(a: np.ndarray, path: str) -> dict:
        dt = a.dtype
        if dt.byteorder == ">" or (dt.byteorder == "=" and not np.little_endian):
            raise UnsendableValueError(f"{path} is a big-endian {dt} array: send arr.astype(arr.dtype.newbyteorder('<')).")
        if dt.kind == "f" and dt.itemsize == 2 and HALF_PRECISION is not None:
            a = _half_np(a)
            dt = a.dtype
        t = _TYPE_OF.get(dt.newbyteorder("<"))
        if t is None:
            fix = _DTYPE_FIX.get(dt.kind) or _DTYPE_FIX.get(dt.str[1:]) or "send an array of int8/16/32/64, uint8/16/32/64, float32 or float64"
            raise UnsendableValueError(f"{path} is a {dt} array, which cannot travel: {fix}.")
        if not a.flags.c_contiguous:
            raise UnsendableValueError(
                f"{path} is a non-contiguous array (shape {a.shape}, strides {a.strides}): its bytes are not one block. "
                f"Send np.ascontiguousarray({path.split('.')[-1]}) (one copy), or build it contiguous."
            )
        flat = a.reshape(-1)
        return add(flat.view(np.uint8), t, flat.size, a)

    def walk(v: Any, path: str, depth: int) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            if not math.isfinite(v):
                raise UnsendableValueError(f"{path} is {v}, which JSON cannot carry: send None or a finite number (or put it in a float array).")
            return v
        if depth > MAX_DEPTH:
            raise UnsendableValueError(f"{path} is nested more than {MAX_DEPTH} levels deep (a cycle?): flatten the value.")
        if isinstance(v, np.ndarray):
            return ndarray(v, path)
        if isinstance(v, np.generic):
            return walk(v.item(), path, depth)
        if isinstance(v, (bytes, bytearray, memoryview)):
            mv = memoryview(v).cast("B") if isinstance(v, memoryview) else memoryview(v)
            if isinstance(v, memoryview) and not v.c_contiguous:
                raise UnsendableValueError(f"{path} is a non-contiguous memoryview: send bytes(view).")
            arr = np.frombuffer(mv, dtype=np.uint8)
            return add(arr, BUFFER_TYPE, arr.size, v)
        if _torch_tensor(v):
            if v.device.type != "cpu":
                raise UnsendableValueError(
                    f"{path} is a torch tensor on {v.device}: only CPU memory can travel. Send {path.split('.')[-1]}.cpu() "
                    f"(after torch.cuda.synchronize() if you time it), or copy it into a pinned CPU tensor you reuse."
                )
            if v.requires_grad:
                v = v.detach()
            if str(v.dtype) in ("torch.float16", "torch.bfloat16") and HALF_PRECISION is not None:
                v = _half_torch(v.contiguous())
            if str(v.dtype) in ("torch.float16", "torch.bfloat16"):
                name = path.split(".")[-1]
                raise UnsendableValueError(
                    f"{path} is a {str(v.dtype)[6:]} torch tensor, which has no TypeScript typed array: convert it where it leaves the model, "
                    f"{name}.float() (float32), or frames as ({name}.clamp(0, 1) * 255).to(torch.uint8) (a quarter of the bytes). "
                    f"Keep computing in {str(v.dtype)[6:]}: only the result converts; {_DECLARE}."
                )
            if not v.is_contiguous():
                raise UnsendableValueError(f"{path} is a non-contiguous torch tensor: send {path.split('.')[-1]}.contiguous().")
            try:
                a = v.numpy()
            except (TypeError, RuntimeError) as err:
                raise UnsendableValueError(f"{path} is a torch tensor of dtype {v.dtype}, which cannot travel ({err}): convert it, e.g. .float().") from None
            return ndarray(a, path)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: walk(getattr(v, f.name), f"{path}.{f.name}", depth + 1) for f in dataclasses.fields(v)}
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise UnsendableValueError(f"{path} has the key {k!r} ({type(k).__name__}): only str keys can travel (JSON objects).")
                if k.startswith("\x00"):
                    raise UnsendableValueError(f"{path} has a key that starts with NUL, reserved by the codec: rename it.")
                out[k] = walk(x, f"{path}.{k}", depth + 1)
            return out
        if isinstance(v, (list, tuple)):
            return [walk(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]
        if isinstance(v, PurePath):
            return str(v)
        raise UnsendableValueError(
            f"{path} is a {type(v).__module__}.{type(v).__qualname__}, which cannot travel to TypeScript: "
            f"return dicts, lists, str, numbers, bools, None, dataclasses and NumPy arrays / CPU torch tensors."
        )

    tree = walk(value, what, 0)
    text = json.dumps(tree, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return Encoded(text, meta, arrays, offsets, cursor)


def decode(payload: dict, read: Any, copy: bool = False) -> Any:
    """Decodes a payload; ``read(ref)`` returns ``(buffer, base)`` for its shared-memory bytes.

    Arrays are 1-D NumPy views of the block (zero copies, valid until the parent writes that block
    again), or with ``copy`` arrays of their own.
    """
    text = payload.get("j")
    if text is None:
        raise UnsendableValueError(
            "The parent sent a value in the v8 format (Map, Set, Date, undefined, NaN, -0, a class instance...), which Python ranks cannot read."
        )
    meta = payload.get("m") or []
    if not meta:
        return json.loads(text)
    ref = payload.get("s")
    buf, base = read(ref) if ref else (None, 0)

    def hook(d: dict) -> Any:
        if len(d) == 1 and PLACEHOLDER in d:
            i = d[PLACEHOLDER] * 3
            t, off, length = meta[i], meta[i + 1], meta[i + 2]
            dt = _WIRE_DTYPES[t]
            if length == 0 or buf is None:
                return np.empty(0, dtype=dt)
            a = np.frombuffer(buf, dtype=dt, count=length, offset=base + off)
            return a.copy() if copy else a
        return d

    return json.loads(text, object_hook=hook)


def digest(value: Any) -> str:
    """A hash of a decoded value (its structure and every array's bytes), for ``verifyInputs``."""
    enc = encode(value, "input")
    h = hashlib.sha256()
    h.update(enc.json.encode())
    h.update(",".join(map(str, enc.meta)).encode())
    for a in enc.arrays:
        h.update(a.data)
    return h.hexdigest()[:16]


def payload_of(enc: Encoded, ref: Optional[dict]) -> dict:
    p: dict = {"j": enc.json}
    if enc.meta:
        p["m"] = enc.meta
    if ref is not None:
        p["s"] = ref
    return p
