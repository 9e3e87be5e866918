"""The training file: (frames, actions) sequences in one ``.npz``, written by the renderer or a recording.

Format (``TRAINING_FORMAT`` 1), NumPy's ``.npz`` (a zip of ``.npy`` arrays, uncompressed):

- ``frames``: uint8 ``[N, T, 64, 64, 3]``, RGB; frame ``t`` shows the world *after* action ``t``;
- ``actions``: uint8 ``[N, T, 6]``, the held keys of each frame (0/1), in ``ACTION_KEYS`` order;
- ``meta``: a JSON string: ``format`` (1), ``source`` (``renderer`` or ``recording``),
  ``map_seed``, ``data_seed``, ``action_keys``.

``T`` is a whole number of chunks (3 frames). Anything else is refused by :func:`read_training_file`
with a ``TrainingDataError`` (code ``world_training_data_invalid``) that names what is wrong: a
truncated file, a missing array, a shape or dtype off the format.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Optional

import numpy as np

from .render import ACTION_KEYS, MAP_SEED, SIZE, World, random_actions, random_pose, rollout, turn_actions

__all__ = ["TrainingDataError", "TRAINING_FORMAT", "generate", "write_training_file", "read_training_file"]

TRAINING_FORMAT = 1
CHUNK = 3


class TrainingDataError(ValueError):
    """A training file the script cannot read (code ``world_training_data_invalid``)."""

    code = "world_training_data_invalid"


#: The action styles :func:`generate` draws: a player's held keys, or turn-heavy clips whose turn
#: key changes on chunk boundaries (``render.turn_actions``).
STYLES = ("player", "turns")


def _block(args: tuple[int, int, int, int, str]) -> tuple[np.ndarray, np.ndarray]:
    data_seed, block, n, frames, style = args
    world = World()
    # "player" keeps the seeding of the first files (data seed 0 draws the same clips as before).
    rng = np.random.default_rng([data_seed, block] if style == "player" else [data_seed, block, STYLES.index(style)])
    pose = random_pose(world, rng, n)
    actions = random_actions(rng, n, frames) if style == "player" else turn_actions(rng, n, frames, CHUNK)
    out, _ = rollout(world, pose, actions)
    return out, actions


def generate(sequences: int, frames: int, data_seed: int, workers: int = 1, block: int = 64, style: str = "player") -> tuple[np.ndarray, np.ndarray]:
    """``sequences`` random sequences of ``frames`` frames of one of :data:`STYLES`; the same for a ``data_seed`` whatever ``workers``."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    jobs = [(data_seed, i, min(block, sequences - i * block), frames, style) for i in range((sequences + block - 1) // block)]
    if workers > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_block, jobs)
    else:
        parts = [_block(j) for j in jobs]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def write_training_file(path: str, frames: np.ndarray, actions: np.ndarray, source: str = "renderer", data_seed: Optional[int] = None) -> None:
    meta = {"format": TRAINING_FORMAT, "source": source, "map_seed": MAP_SEED, "data_seed": data_seed, "action_keys": list(ACTION_KEYS)}
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, frames=frames, actions=actions, meta=np.array(json.dumps(meta)))
    os.replace(tmp, path)


def read_training_file(path: str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``(frames, actions, meta)`` of a training file, checked against the format."""
    where = f"training file {path}"
    if not os.path.exists(path):
        raise TrainingDataError(f"{where} does not exist; make one with apps/world/train/train.py --data-only")
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            names = set(z.files)
            for need in ("frames", "actions", "meta"):
                if need not in names:
                    raise TrainingDataError(f"{where} has no {need!r} array (it has {', '.join(sorted(names)) or 'none'}); it is not a tiny-world training file")
            frames, actions, meta = z["frames"], z["actions"], json.loads(str(z["meta"]))
    except TrainingDataError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        size = os.path.getsize(path)
        raise TrainingDataError(f"{where} is truncated or not an .npz ({size} bytes; {type(e).__name__}: {e}); write it again (apps/world/train/train.py --data-only)") from None
    if meta.get("format") != TRAINING_FORMAT:
        raise TrainingDataError(f"{where} is format {meta.get('format')!r}; this script reads format {TRAINING_FORMAT}")
    if list(meta.get("action_keys", [])) != list(ACTION_KEYS):
        raise TrainingDataError(f"{where} has action keys {meta.get('action_keys')}; the model's are {list(ACTION_KEYS)}")
    if frames.dtype != np.uint8 or frames.ndim != 5 or frames.shape[2:] != (SIZE, SIZE, 3):
        raise TrainingDataError(f"{where}: frames must be uint8 [N, T, {SIZE}, {SIZE}, 3], got {frames.dtype} {list(frames.shape)}")
    if actions.dtype != np.uint8 or actions.shape != (*frames.shape[:2], len(ACTION_KEYS)):
        raise TrainingDataError(f"{where}: actions must be uint8 {[*frames.shape[:2], len(ACTION_KEYS)]}, got {actions.dtype} {list(actions.shape)}")
    if frames.shape[1] < CHUNK or frames.shape[1] % CHUNK:
        raise TrainingDataError(f"{where}: {frames.shape[1]} frames a sequence is not a whole number of {CHUNK}-frame chunks")
    return frames, actions, meta
