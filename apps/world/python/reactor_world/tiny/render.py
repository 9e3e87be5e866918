"""The tiny world's ground truth: a first-person raycaster through one fixed maze, NumPy only.

A camera stands in a 16x16 grid of walls (the map is drawn once from ``MAP_SEED``; the model
learns this one level, as DIAMOND and GameNGen learn theirs) and moves by held keys, one action a
frame: forward/back (0.25 cells), turn left/right (10 degrees), strafe left/right (0.2 cells);
a move into a wall stops at the wall. Each frame is 64x64 RGB: a ceiling and a floor gradient,
walls coloured per cell with stripes along them, the y-facing sides darker, farther walls dimmer.
Turning left moves the picture right by about 10 pixels a frame; forward makes walls grow.

Everything is deterministic from a seed: :func:`random_actions` draws held-key sequences as a
player holds keys, :func:`rollout` renders the frames for any start pose and action sequence, so
the renderer says what *every* generated frame should have been (``evaluate.py``).

An action is 6 held-key bits, in :data:`ACTION_KEYS` order; several may be held at once.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ACTION_KEYS",
    "ACTION_BINDINGS",
    "SIZE",
    "MAP_SEED",
    "World",
    "actions_from_keys",
    "random_actions",
    "random_pose",
    "turn_actions",
    "rollout",
]

SIZE = 64
MAP_SEED = 40
#: The action bits, in order; each is one held key.
ACTION_KEYS = ("forward", "back", "turn_left", "turn_right", "strafe_left", "strafe_right")
#: The keyboard keys (``KeyboardEvent.key``, lower case) that hold each action.
ACTION_BINDINGS = {"w": "forward", "s": "back", "a": "turn_left", "d": "turn_right", "q": "strafe_left", "e": "strafe_right"}
MOVE, TURN, STRAFE = 0.25, np.deg2rad(10.0), 0.2
FOV_PLANE = 0.66  # the camera plane's half-width: a 66-degree field of view
RADIUS = 0.2  # how close the camera may come to a wall
PALETTE = np.array(
    [[200, 60, 50], [60, 160, 70], [60, 90, 200], [210, 180, 60], [170, 80, 190], [70, 190, 190], [220, 130, 60], [150, 150, 150]],
    dtype=np.float32,
)


def _make_map(seed: int, n: int = 16) -> np.ndarray:
    """Cell codes: 0 free, 1..8 a wall of that palette colour. Border walls, then pillars and
    wall runs, with a carved random walk so every free cell is reachable from the centre region."""
    rng = np.random.default_rng(seed)
    grid = np.zeros((n, n), dtype=np.int64)
    grid[0, :] = grid[-1, :] = grid[:, 0] = grid[:, -1] = 1
    for _ in range(40):
        x, y = rng.integers(2, n - 2, size=2)
        length = int(rng.integers(1, 5))
        dx, dy = ((1, 0), (0, 1))[int(rng.integers(2))]
        for i in range(length):
            cx, cy = min(n - 2, x + dx * i), min(n - 2, y + dy * i)
            grid[cy, cx] = 1
    # Carve a walk so the level is connected enough to wander.
    x, y = n // 2, n // 2
    for _ in range(160):
        grid[y, x] = 0
        dx, dy = ((1, 0), (-1, 0), (0, 1), (0, -1))[int(rng.integers(4))]
        x, y = int(np.clip(x + dx, 1, n - 2)), int(np.clip(y + dy, 1, n - 2))
    walls = grid > 0
    colours = rng.integers(1, len(PALETTE) + 1, size=grid.shape)
    return np.where(walls, colours, 0)


class World:
    """The level and its renderer; ``World()`` is the shipped level (``MAP_SEED``)."""

    def __init__(self, map_seed: int = MAP_SEED, size: int = SIZE) -> None:
        self.map_seed = map_seed
        self.grid = _make_map(map_seed)
        self.size = size
        self.free = np.argwhere(self.grid == 0)  # (row=y, col=x)
        # Ceiling and floor, the same for every frame.
        rows = np.arange(size, dtype=np.float32)[:, None]
        half = size / 2
        ceil = np.array([90, 120, 170], np.float32) * (0.55 + 0.45 * (1 - rows / half))
        floor = np.array([110, 95, 80], np.float32) * (0.35 + 0.65 * ((rows - half) / half))
        self.background = np.where(rows < half, ceil, floor)[:, None, :].repeat(size, axis=1)  # [H, W, 3]

    def wall(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        xi, yi = np.floor(x).astype(np.int64), np.floor(y).astype(np.int64)
        n = self.grid.shape[0]
        inside = (xi >= 0) & (xi < n) & (yi >= 0) & (yi < n)
        return np.where(inside, self.grid[np.clip(yi, 0, n - 1), np.clip(xi, 0, n - 1)] > 0, True)

    def step(self, pose: np.ndarray, action: np.ndarray) -> np.ndarray:
        """Poses ``[N, 3]`` (x, y, angle) after actions ``[N, 6]`` (held-key bits)."""
        x, y, a = pose[:, 0].copy(), pose[:, 1].copy(), pose[:, 2].copy()
        act = action.astype(np.float64)
        a = a + TURN * (act[:, 3] - act[:, 2])
        fwd = MOVE * (act[:, 0] - act[:, 1])
        side = STRAFE * (act[:, 5] - act[:, 4])
        # y grows down the map (rows), so a growing angle turns clockwise seen from above: right.
        # Forward is (cos a, sin a); the screen's right is the camera plane's (-sin a, cos a).
        dx = fwd * np.cos(a) - side * np.sin(a)
        dy = fwd * np.sin(a) + side * np.cos(a)
        # Axis-separated collision: slide along walls.
        nx = x + dx
        blocked_x = self.wall(nx + np.sign(dx) * RADIUS, y)
        x = np.where(blocked_x, x, nx)
        ny = y + dy
        blocked_y = self.wall(x, ny + np.sign(dy) * RADIUS)
        y = np.where(blocked_y, y, ny)
        return np.stack([x, y, np.mod(a, 2 * np.pi)], axis=1)

    def render(self, pose: np.ndarray) -> np.ndarray:
        """``[N, 3]`` poses -> ``[N, H, W, 3]`` uint8 frames (DDA raycasting, one ray a column)."""
        n, w, h = pose.shape[0], self.size, self.size
        cam = 2 * (np.arange(w) + 0.5) / w - 1  # -1 (left) .. 1 (right)
        ca, sa = np.cos(pose[:, 2])[:, None], np.sin(pose[:, 2])[:, None]
        # Camera plane to the right of the view direction (screen x grows to the right).
        rdx = ca - sa * FOV_PLANE * cam[None, :]
        rdy = sa + ca * FOV_PLANE * cam[None, :]
        px, py = pose[:, 0][:, None] * np.ones((1, w)), pose[:, 1][:, None] * np.ones((1, w))
        mx, my = np.floor(px).astype(np.int64), np.floor(py).astype(np.int64)
        with np.errstate(divide="ignore"):
            ddx, ddy = np.abs(1 / rdx), np.abs(1 / rdy)
        sx, sy = np.where(rdx < 0, -1, 1), np.where(rdy < 0, -1, 1)
        sdx = np.where(rdx < 0, (px - mx) * ddx, (mx + 1 - px) * ddx)
        sdy = np.where(rdy < 0, (py - my) * ddy, (my + 1 - py) * ddy)
        hit = np.zeros((n, w), bool)
        side = np.zeros((n, w), np.int64)
        cell = np.zeros((n, w), np.int64)
        g = self.grid
        last = g.shape[0] - 1
        for _ in range(2 * g.shape[0] + 2):
            if hit.all():
                break
            go_x = (sdx < sdy) & ~hit
            go_y = ~(sdx < sdy) & ~hit
            sdx = np.where(go_x, sdx + ddx, sdx)
            mx = np.where(go_x, mx + sx, mx)
            sdy = np.where(go_y, sdy + ddy, sdy)
            my = np.where(go_y, my + sy, my)
            side = np.where(go_x, 0, np.where(go_y, 1, side))
            c = g[np.clip(my, 0, last), np.clip(mx, 0, last)]
            new = ~hit & (c > 0)
            cell = np.where(new, c, cell)
            hit |= new
        dist = np.where(side == 0, sdx - ddx, sdy - ddy)
        dist = np.maximum(dist, 1e-3)
        # Where along the wall the ray hit (0..1): the stripes.
        u = np.where(side == 0, py + dist * rdy, px + dist * rdx)
        u = u - np.floor(u)
        stripe = np.where((np.floor(u * 4).astype(np.int64) % 2) == 0, 1.0, 0.78)
        shade = np.where(side == 1, 0.7, 1.0) * np.clip(1.25 - dist / 10, 0.35, 1.0) * stripe
        colour = PALETTE[np.maximum(cell, 1) - 1] * shade[..., None]  # [N, W, 3]
        line = h / dist  # wall height in pixels
        rows = np.arange(h)[None, :, None] + 0.5
        top = (h / 2 - line / 2)[:, None, :]
        bottom = (h / 2 + line / 2)[:, None, :]
        on_wall = (rows >= top) & (rows < bottom)  # [N, H, W]
        out = np.where(on_wall[..., None], colour[:, None, :, :], self.background[None])
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def random_pose(world: World, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` start poses at the centres of free cells, facing anywhere."""
    cells = world.free[rng.integers(len(world.free), size=n)]
    return np.stack([cells[:, 1] + 0.5, cells[:, 0] + 0.5, rng.uniform(0, 2 * np.pi, size=n)], axis=1)


def random_actions(rng: np.random.Generator, n: int, frames: int) -> np.ndarray:
    """``[n, frames, 6]`` held keys, as a player holds them: each axis (move, turn, strafe) keeps
    one state (none / one way / the other) for 2..12 frames before it changes."""
    out = np.zeros((n, frames, 6), dtype=np.uint8)
    probs = ((0.35, 0.5, 0.15), (0.45, 0.275, 0.275), (0.7, 0.15, 0.15))  # none, first key, second key
    for axis, p in enumerate(probs):
        for i in range(n):
            t = 0
            while t < frames:
                hold = int(rng.integers(2, 13))
                state = int(rng.choice(3, p=p))
                if state:
                    out[i, t : t + hold, 2 * axis + state - 1] = 1
                t += hold
    return out


def turn_actions(rng: np.random.Generator, n: int, frames: int, chunk: int = 3) -> np.ndarray:
    """``[n, frames, 6]`` held keys that turn a lot and change the turn on chunk boundaries: the
    turn axis keeps one state (none 0.2 / left 0.4 / right 0.4) for 1..3 whole chunks, so a clip
    has many turn onsets, stops and reversals exactly where a chunk starts (what a player's key
    press is to the model: the keys change, the context frames have not moved yet); the move and
    strafe axes are drawn as :func:`random_actions` draws them, strafing half as often."""
    out = np.zeros((n, frames, 6), dtype=np.uint8)
    probs = ((0.35, 0.5, 0.15), (0.2, 0.4, 0.4), (0.85, 0.075, 0.075))
    for axis, p in enumerate(probs):
        for i in range(n):
            t = 0
            while t < frames:
                hold = chunk * int(rng.integers(1, 4)) if axis == 1 else int(rng.integers(2, 13))
                state = int(rng.choice(3, p=p))
                if state:
                    out[i, t : t + hold, 2 * axis + state - 1] = 1
                t += hold
    return out


def rollout(world: World, pose: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frames ``[N, T, H, W, 3]`` for actions ``[N, T, 6]`` from ``pose`` ``[N, 3]``: frame ``t`` shows
    the pose after action ``t`` (so frame 0 is the start pose moved by ``actions[:, 0]``).
    Returns the frames and the poses ``[N, T, 3]``."""
    n, t = actions.shape[0], actions.shape[1]
    poses = np.zeros((n, t, 3))
    p = pose
    for i in range(t):
        p = world.step(p, actions[:, i])
        poses[:, i] = p
    frames = world.render(poses.reshape(n * t, 3)).reshape(n, t, world.size, world.size, 3)
    return frames, poses


def actions_from_keys(keys: list[str]) -> np.ndarray:
    """Held ``KeyboardEvent.key`` names -> one action (``[6]`` bits); an unknown key raises ``KeyError``."""
    bits = np.zeros(6, dtype=np.uint8)
    for k in keys:
        bits[ACTION_KEYS.index(ACTION_BINDINGS[k])] = 1
    return bits
