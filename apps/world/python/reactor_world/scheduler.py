"""Flow matching, as Self-Forcing samples it (``utils/scheduler.py``'s ``FlowMatchScheduler``).

1,000 training timesteps on ``sigma = shift * s / (1 + (shift - 1) * s)`` for ``s`` from 1 down to
0 (``sigma_min = 0``, ``extra_one_step``), shift 5. The few-step list (``1000, 750, 500, 250``) is
warped onto that schedule (``warp_denoising_step``: entry ``1000 - step`` of the timesteps). A step
predicts the flow ``v``; ``x0 = x_t - sigma_t v`` (in float64); the next step's input is ``x0``
noised again to the next timestep with fresh noise: ``(1 - sigma) x0 + sigma noise``.
"""

from __future__ import annotations

import torch

__all__ = ["FlowMatch"]


class FlowMatch:
    def __init__(self, shift: float = 5.0, train_steps: int = 1000) -> None:
        s = torch.linspace(1.0, 0.0, train_steps + 1)[:-1]
        self.sigmas = shift * s / (1 + (shift - 1) * s)
        self.timesteps = self.sigmas * train_steps
        self.train_steps = train_steps

    def warp(self, steps: tuple[int, ...]) -> torch.Tensor:
        """The float32 timesteps of a few-step list (``1000`` -> ``1000.0``, ``750`` -> ``t[250]`` ...)."""
        table = torch.cat([self.timesteps, torch.tensor([0.0])])
        return table[self.train_steps - torch.tensor(steps, dtype=torch.long)]

    def sigma(self, t: torch.Tensor) -> torch.Tensor:
        """Each timestep's sigma (the nearest of the table), float64."""
        ts = self.timesteps.to(device=t.device, dtype=torch.float64)
        idx = torch.argmin((ts.unsqueeze(0) - t.to(torch.float64).flatten().unsqueeze(1)).abs(), dim=1)
        return self.sigmas.to(device=t.device, dtype=torch.float64)[idx]

    def to_x0(self, flow: torch.Tensor, xt: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``x0 = x_t - sigma_t * flow``; ``flow``/``xt`` are ``[N, ...]`` with one timestep each in ``t`` (``[N]``)."""
        sig = self.sigma(t).reshape(-1, *([1] * (flow.dim() - 1)))
        return (xt.double() - sig * flow.double()).to(flow.dtype)

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``(1 - sigma_t) x0 + sigma_t noise`` with float32 sigmas (the reference's ``add_noise``)."""
        ts = self.timesteps.to(device=noise.device)
        idx = torch.argmin((ts.unsqueeze(0) - t.flatten().to(ts.dtype).unsqueeze(1)).abs(), dim=1)
        sig = self.sigmas.to(device=noise.device)[idx].reshape(-1, *([1] * (x0.dim() - 1)))
        return ((1 - sig) * x0 + sig * noise).type_as(noise)
