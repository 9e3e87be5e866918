"""Point-to-point sends between the stages of a pipeline of Python ranks (``torch.distributed``).

A pipeline's stages hand activations on with ``torch.distributed.send``/``recv`` (gloo on CPU
ranks, NCCL on GPU ranks), after :func:`reactor_worker.init_distributed`. These two helpers add a
small header (rank, dtype, shape) before each tensor, so a stage that expects another shape or
dtype than its predecessor sends fails on the receiving rank with :class:`PipelineShapeError`
(code ``pipeline_shape``) naming both ranks and both shapes, instead of reading garbage or
hanging: the sender's data is drained first, so the sender is not left waiting. While a rank
waits in either, its progress block names the peer (``docs/runner.md``, "Pipelines").
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from reactor_worker import PythonWorkerError

# dtype <-> code in the header (the dtypes an activation has).
_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8")
_MAX_DIMS = 8


class PipelineShapeError(PythonWorkerError):
    """Two stages of a pipeline disagree on the activation between them (code ``pipeline_shape``)."""

    def __init__(self, message: str, sender: int, receiver: int, sent: Sequence[int], expected: Sequence[int]) -> None:
        super().__init__("pipeline_shape", message)
        self.sender = sender
        self.receiver = receiver
        self.sent = list(sent)
        self.expected = list(expected)


def _dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def send_tensor(tensor: Any, dst: int) -> None:
    """Sends ``tensor`` to rank ``dst`` (which calls :func:`recv_tensor`), header first."""
    import torch
    import torch.distributed as dist

    name = _dtype_name(tensor)
    if name not in _DTYPES or tensor.dim() > _MAX_DIMS:
        raise TypeError(f"send_tensor() sends tensors of {', '.join(_DTYPES)} with up to {_MAX_DIMS} dimensions, got {name} with {tensor.dim()}.")
    header = torch.zeros(2 + _MAX_DIMS, dtype=torch.int64)
    header[0] = _DTYPES.index(name)
    header[1] = tensor.dim()
    for i, d in enumerate(tensor.shape):
        header[2 + i] = int(d)
    dist.send(header, dst)
    # gloo moves CPU tensors only: a CUDA tensor goes through host memory (ranks sharing one GPU).
    data = tensor.contiguous()
    if data.is_cuda and dist.get_backend() == "gloo":
        data = data.cpu()
    dist.send(data, dst)


def recv_tensor(src: int, shape: Optional[Sequence[int]] = None, dtype: Any = None, device: Any = "cpu") -> Any:
    """Receives the tensor rank ``src`` sent with :func:`send_tensor`.

    With ``shape`` (and ``dtype``), a tensor of another shape or dtype raises
    :class:`PipelineShapeError` on this rank once its bytes are drained.
    """
    import torch
    import torch.distributed as dist

    header = torch.zeros(2 + _MAX_DIMS, dtype=torch.int64)
    dist.recv(header, src)
    sent_dtype = _DTYPES[int(header[0])]
    sent_shape = [int(d) for d in header[2 : 2 + int(header[1])]]
    staged = str(device).startswith("cuda") and dist.get_backend() == "gloo"
    buf = torch.empty(sent_shape, dtype=getattr(torch, sent_dtype), device="cpu" if staged else device)
    dist.recv(buf, src)
    if staged:
        buf = buf.to(device)
    want_dtype = None if dtype is None else str(dtype).replace("torch.", "")
    if (shape is not None and list(shape) != sent_shape) or (want_dtype is not None and want_dtype != sent_dtype):
        me = dist.get_rank()
        want = f"{list(shape) if shape is not None else sent_shape} {want_dtype or sent_dtype}"
        raise PipelineShapeError(
            f"pipeline stages disagree: rank {me} expected {want} from rank {src}, which sent {sent_shape} {sent_dtype}. "
            f"Give every stage the same config (the split of the blocks, the chunk's shape, the dtype).",
            src,
            me,
            sent_shape,
            list(shape) if shape is not None else sent_shape,
        )
    return buf
