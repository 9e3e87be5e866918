"""Attention, written once for every torch this app meets.

``F.scaled_dot_product_attention`` (torch >= 2.0: flash / memory-efficient kernels on CUDA) where
torch has it; the same maths spelled out (``softmax(q k^T / sqrt(d)) v``) on Debian's torch 1.13,
which CI runs. Both take and return ``[batch, tokens, heads, head_dim]``, Wan's layout.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["attention", "HAS_SDPA"]

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Full (unmasked) attention of ``q`` over ``k``/``v``, in their dtype."""
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if HAS_SDPA:
        out = F.scaled_dot_product_attention(q, k, v)
    else:
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
    return out.transpose(1, 2).contiguous()
