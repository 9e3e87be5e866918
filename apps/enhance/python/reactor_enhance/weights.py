"""Reads an ESRGAN model (``@upscalerjs/esrgan-{slim,medium,thick}``, ``models/x<N>/``) from the
installed npm package: ``model.json`` and its weight shards, each hashed (SHA-256) and checked the
way ``apps/enhance/src/weights.ts`` checks them for the tfjs backend:

- the published ``model.json``'s hash is known: a different one is a corrupt file;
- a float16 copy (the GPU bundle's thick) names its shards' hashes itself
  (``reactorShardSha256``);
- every shard's size must match what the manifest declares, and its hash the expected one.

A missing or wrong file is a :class:`WeightsMissingError` / :class:`WeightsCorruptError` naming the
file (the same class names, codes and messages as the TypeScript side).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

MODEL_NAMES = ("slim", "medium", "thick")

#: Input/output value range per model (slim/medium: 0..255, thick: 0..1).
MODEL_RANGE = {"slim": 255, "medium": 255, "thick": 1}

_BYTES = {"float32": 4, "int32": 4, "float16": 2, "uint16": 2, "uint8": 1, "bool": 1}
_NP = {"float32": "<f4", "int32": "<i4", "float16": "<f2", "uint16": "<u2", "uint8": "u1", "bool": "u1"}


class EnhanceError(Exception):
    """Base of the enhance app's errors; ``code`` is the stable code of ``docs/errors.md``."""

    code = "enhance_error"


class WeightsMissingError(EnhanceError):
    """A model file is missing or unreadable (code ``enhance_weights_missing``)."""

    code = "enhance_weights_missing"

    @classmethod
    def for_file(cls, path: str, model: str, scale: int, why: str) -> "WeightsMissingError":
        return cls(
            f"cannot read {path} (ESRGAN {model} x{scale}): {why}. Install the model package "
            f"(pnpm install puts @upscalerjs/esrgan-{model} under apps/enhance/node_modules), or pick a model and scale "
            "that this installation carries (the GPU bundle carries x4 only)."
        )


class WeightsCorruptError(EnhanceError):
    """A model file is there but wrong (code ``enhance_weights_corrupt``)."""

    code = "enhance_weights_corrupt"

    @classmethod
    def for_file(cls, path: str, model: str, scale: int, problem: str) -> "WeightsCorruptError":
        return cls(
            f"{path} (ESRGAN {model} x{scale}) is corrupt: {problem}. Reinstall the package "
            "(rm -rf apps/enhance/node_modules && pnpm install --frozen-lockfile) or rebuild the bundle."
        )


@dataclass
class ModelFile:
    path: str
    bytes: int
    sha256: str


@dataclass
class ModelOnDisk:
    """A model's files read and checked, its weights as float32 NumPy arrays by name."""

    model: str
    scale: int
    dir: str
    files: list[ModelFile]
    #: SHA-256 over every file's hash, in order (the same fingerprint as the tfjs backend's).
    sha256: str
    #: Stored weight type(s): ``float32``, or ``float16`` for a quantized copy.
    weight_dtype: str
    topology: dict[str, Any]
    #: Input rows of context an output row needs (``receptiveRadius`` of ``src/weights.ts``).
    radius: int
    weights: dict[str, np.ndarray] = field(repr=False)


_NO_FIELD = ("InputLayer", "Activation", "Concatenate", "Add", "UpSampling2D", "MultiplyBeta", "LeakyReLU", "ReLU", "PReLU")


def receptive_radius(topology: dict[str, Any]) -> int:
    """Input rows an output row depends on, at most: the longest chain of convolution radii from the
    input to the output (a ``k``x``k`` convolution adds ``(k-1)/2``), as the tfjs side computes it.

    :raises ValueError: a layer whose receptive field is not known
    """
    cfg = (topology.get("model_config") or {}).get("config") or topology.get("config") or {}
    layers = cfg.get("layers")
    if not isinstance(layers, list):
        raise ValueError("model topology has no layer list")
    radius: dict[str, int] = {}
    for layer in layers:
        base = 0
        for node in layer.get("inbound_nodes") or []:
            for inbound in node:
                base = max(base, radius.get(str(inbound[0]), 0))
        own = 0.0
        cls, conf = layer["class_name"], layer.get("config") or {}
        if cls in ("Conv2D", "DepthwiseConv2D", "SeparableConv2D"):
            own = (max(conf.get("kernel_size") or [1]) - 1) * max(conf.get("dilation_rate") or [1]) / 2
        elif cls not in _NO_FIELD and not (cls.startswith("PixelShuffle") and cls.endswith("x")):
            raise ValueError(f"layer {layer['name']} ({cls}) has no known receptive field; tiles cannot be cut for this model")
        radius[layer["name"]] = base + int(np.ceil(own))
    return max([0, *radius.values()])


def model_dir(package_dir: str, scale: int) -> str:
    """``models/x<scale>`` of a model package (where ``model.json`` lives)."""
    return os.path.join(package_dir, "models", f"x{scale}")


def _read(path: str, model: str, scale: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise WeightsMissingError.for_file(path, model, scale, "no such file") from None
    except OSError as e:
        raise WeightsMissingError.for_file(path, model, scale, e.strerror or str(e)) from None


def read_model_files(
    model: str,
    scale: int,
    package_dir: str,
    published_sha256: Mapping[str, str] | None = None,
) -> ModelOnDisk:
    """Reads and checks ``model`` x``scale`` from the package folder ``package_dir``.

    :param published_sha256: the published files' hashes, keyed ``<model>/x<scale>/<file>``
        (``PUBLISHED_SHA256`` of ``apps/enhance/src/checksums.ts``, which the TypeScript app passes
        in, so there is one table); ``None`` checks sizes only.
    :raises WeightsMissingError: a file cannot be read
    :raises WeightsCorruptError: a file is wrong (JSON, size, hash)
    """
    d = model_dir(package_dir, scale)
    json_path = os.path.join(d, "model.json")
    raw = _read(json_path, model, scale)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightsCorruptError.for_file(json_path, model, scale, f"not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not doc.get("modelTopology") or not isinstance(doc.get("weightsManifest"), list):
        raise WeightsCorruptError.for_file(json_path, model, scale, "not a tfjs layers model (modelTopology or weightsManifest missing)")
    try:
        radius = receptive_radius(doc["modelTopology"])
    except (ValueError, KeyError, TypeError) as e:
        raise WeightsCorruptError.for_file(json_path, model, scale, str(e)) from None
    json_hash = hashlib.sha256(raw).hexdigest()
    files = [ModelFile(json_path, len(raw), json_hash)]
    table = published_sha256 or {}
    published = table.get(f"{model}/x{scale}/model.json")
    own = doc.get("reactorShardSha256")
    if own is None and published is not None and published != json_hash:
        raise WeightsCorruptError.for_file(json_path, model, scale, f"its SHA-256 is {json_hash}, the published file's is {published}")

    def expected_hash(name: str) -> str | None:
        if own is not None:
            return own.get(name)
        return table.get(f"{model}/x{scale}/{name}") if published == json_hash else None

    weights: dict[str, np.ndarray] = {}
    dtypes: list[str] = []
    for group in doc["weightsManifest"]:
        shards = []
        for name in group["paths"]:
            p = os.path.join(d, name)
            b = _read(p, model, scale)
            h = hashlib.sha256(b).hexdigest()
            files.append(ModelFile(p, len(b), h))
            shards.append((p, name, b, h))
        expected = 0
        for w in group["weights"]:
            dt = (w.get("quantization") or {}).get("dtype", w["dtype"])
            if dt not in _BYTES:
                raise WeightsCorruptError.for_file(json_path, model, scale, f"weight {w['name']} has an unknown dtype {dt}")
            if dt not in dtypes:
                dtypes.append(dt)
            expected += int(np.prod(w["shape"], dtype=np.int64)) * _BYTES[dt]
        got = sum(len(s[2]) for s in shards)
        if got != expected:
            # Shards are filled in order, each full but the last: name the one at fault.
            full = len(shards[0][2]) if shards else 0
            culprit = shards[-1][0] if shards else json_path
            for s in shards[:-1]:
                if len(s[2]) != full:
                    culprit = s[0]
            raise WeightsCorruptError.for_file(culprit, model, scale, f"the weights need {expected} bytes but the shards of {json_path} hold {got}")
        for p, name, _b, h in shards:
            want = expected_hash(name)
            if want is not None and want != h:
                raise WeightsCorruptError.for_file(p, model, scale, f"its SHA-256 is {h}, expected {want}")
        data = b"".join(s[2] for s in shards)
        off = 0
        for w in group["weights"]:
            q = w.get("quantization") or {}
            dt = q.get("dtype", w["dtype"])
            count = int(np.prod(w["shape"], dtype=np.int64))
            arr = np.frombuffer(data, dtype=_NP[dt], count=count, offset=off).reshape(w["shape"])
            off += count * _BYTES[dt]
            if dt in ("uint8", "uint16") and "scale" in q:
                # tfjs's affine quantization: value = q * scale + min.
                arr = arr.astype(np.float32) * np.float32(q["scale"]) + np.float32(q.get("min", 0.0))
            weights[w["name"]] = np.array(arr, dtype=np.float32)  # a writable copy (torch.from_numpy warns on read-only)
    fp = hashlib.sha256()
    for f in files:
        fp.update(f.sha256.encode("ascii"))
    return ModelOnDisk(
        model=model,
        scale=scale,
        dir=d,
        files=files,
        sha256=fp.hexdigest(),
        weight_dtype=",".join(dtypes),
        topology=doc["modelTopology"],
        radius=radius,
        weights=weights,
    )
