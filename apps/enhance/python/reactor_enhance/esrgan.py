"""The ESRGAN graphs of ``@upscalerjs/esrgan-*`` as a PyTorch module, built at load from the tfjs
layers model (``model.json``'s Keras topology) and its weights, so the PyTorch backend runs the
same pretrained network as the tfjs backend.

What is reproduced exactly, layer by layer (``test/torch-backend.test.ts`` compares the two):

- ``Conv2D`` (stride 1, ``same``/``valid``): Keras kernels ``[kh, kw, in, out]`` become
  ``[out, in, kh, kw]``; ``same`` with an odd kernel and stride 1 pads ``(k-1)/2`` on every
  side, which is PyTorch's ``padding=k//2`` (zero padding in both).
- Layout: tfjs runs NHWC; the module runs NCHW tensors (``channels_last`` memory on CUDA), so
  ``Concatenate(axis=3)`` is ``cat(dim=1)``; input and output cross over at the edges.
- ``UpSampling2D`` (nearest, integer size): every pixel repeated ``size`` times each way.
- ``PixelShuffle<N>x``: tfjs's ``depthToSpace(x, N, 'NHWC')`` puts input channel
  ``(dy·N + dx)·C + c`` at output ``(y·N + dy, x·N + dx, c)``. PyTorch's ``pixel_shuffle`` reads
  channel ``c·N² + dy·N + dx`` instead, so it is not used: the channels are split as
  ``[N, N, C]`` and permuted, which is depth-to-space's own order.
- ``MultiplyBeta``: times ``beta`` (0.2, from the layer config as in the files).

On CPU every convolution runs oneDNN's kernel (``torch.mkldnn_convolution``), whatever the batch.
``Conv2d`` would pick it by shape: PyTorch 1.13 runs a float32 3x3 convolution on its own
im2col + GEMM kernel when the batch is 1 and the input has at most 20480 values (its
``use_mkldnn`` test), else on oneDNN, and the two sum in different orders. A frame upscaled
alone (a rank's one frame of a step split by frames) then had a byte one level off the same
frame upscaled in a batch (AVX-512 Xeon, torch 1.13.1); oneDNN's result for a frame depends on
neither the batch nor the thread count (``docs/decisions.md``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .weights import MODEL_RANGE, ModelOnDisk, WeightsCorruptError

if TYPE_CHECKING:
    from reactor_worker.compile import FixedShape

_SHUFFLE = re.compile(r"^PixelShuffle(\d+)x$")
_PASS = ("InputLayer",)


def depth_to_space_nchw(x: torch.Tensor, n: int) -> torch.Tensor:
    """tfjs/TensorFlow ``depth_to_space`` (NHWC channel order) on an NCHW tensor, worked on its
    NHWC view: ``[b, h, w, (dy, dx, c)]`` -> ``[b, h, dy, w, dx, c]``. The result is NCHW with
    ``channels_last`` memory."""
    b, c, h, w = x.shape
    oc = c // (n * n)
    t = x.permute(0, 2, 3, 1).reshape(b, h, w, n, n, oc).permute(0, 1, 3, 2, 4, 5)
    return t.reshape(b, h * n, w * n, oc).permute(0, 3, 1, 2)


def upsample_nearest_nchw(x: torch.Tensor, n: int) -> torch.Tensor:
    """Keras ``UpSampling2D(size=n, interpolation='nearest')``: each pixel repeated ``n`` x ``n``
    (worked on the NHWC view; the result has ``channels_last`` memory)."""
    b, c, h, w = x.shape
    t = x.permute(0, 2, 3, 1)[:, :, None, :, None, :].expand(b, h, n, w, n, c)
    return t.reshape(b, h * n, w * n, c).permute(0, 3, 1, 2)


class EsrganGraph(nn.Module):
    """One ESRGAN graph: ``forward`` takes NCHW float input in the model's range and returns the
    NCHW output in that range (0..255 for slim and medium, 0..1 for thick)."""

    def __init__(self, files: ModelOnDisk):
        super().__init__()
        topo: dict[str, Any] = files.topology
        cfg = (topo.get("model_config") or topo).get("config")
        if not isinstance(cfg, dict) or not isinstance(cfg.get("layers"), list):
            raise WeightsCorruptError.for_file(files.files[0].path, files.model, files.scale, "model topology has no layer list")
        self.model = files.model
        self.range = MODEL_RANGE[files.model]
        # Set by TorchUpscaler on CPU float32: every convolution on oneDNN (see the module doc).
        self.onednn = False
        self.convs = nn.ModuleDict()
        # (kind, name, inputs, arg) in topological order (Keras lists layers that way).
        self.ops: list[tuple[str, str, list[str], Any]] = []
        used: set[str] = set()
        for layer in cfg["layers"]:
            cls, name, conf = layer["class_name"], layer["name"], layer.get("config") or {}
            inputs = [str(i[0]) for node in layer.get("inbound_nodes") or [] for i in node]
            if cls == "InputLayer":
                self.ops.append(("input", name, [], None))
                continue
            if cls == "Conv2D":
                self._conv(files, name, conf, used)
                self.ops.append(("conv", name, inputs, None))
            elif cls == "Activation":
                if conf.get("activation") not in ("relu", "linear"):
                    raise self._unsupported(files, name, f"activation {conf.get('activation')!r}")
                self.ops.append(("relu" if conf["activation"] == "relu" else "id", name, inputs, None))
            elif cls == "Concatenate":
                axis = conf.get("axis", -1)
                if axis not in (3, -1):
                    raise self._unsupported(files, name, f"concatenation on axis {axis}")
                self.ops.append(("cat", name, inputs, None))
            elif cls == "Add":
                self.ops.append(("add", name, inputs, None))
            elif cls == "MultiplyBeta":
                self.ops.append(("mul", name, inputs, float(conf.get("beta", 0.2))))
            elif cls == "UpSampling2D":
                size = conf.get("size", [2, 2])
                if conf.get("interpolation", "nearest") != "nearest" or size[0] != size[1]:
                    raise self._unsupported(files, name, f"upsampling {conf.get('interpolation')} {size}")
                self.ops.append(("up", name, inputs, int(size[0])))
            elif _SHUFFLE.match(cls):
                self.ops.append(("shuffle", name, inputs, int(_SHUFFLE.match(cls).group(1))))  # type: ignore[union-attr]
            else:
                raise self._unsupported(files, name, f"layer class {cls}")
        unused = sorted(set(files.weights) - used)
        if unused:
            raise WeightsCorruptError.for_file(files.files[0].path, files.model, files.scale, f"weights no layer uses: {', '.join(unused[:5])}")
        outs = (cfg.get("output_layers") or [[self.ops[-1][1]]])
        self.output = str(outs[0][0])
        self.input = next(name for kind, name, _, _ in self.ops if kind == "input")
        # After its last use a value is dropped, so a long graph (thick: 154 convolutions) keeps
        # only what is still needed.
        last: dict[str, int] = {}
        for i, (_, _, inputs, _) in enumerate(self.ops):
            for v in inputs:
                last[v] = i
        self.free_after: list[list[str]] = [[] for _ in self.ops]
        for v, i in last.items():
            if v != self.output:
                self.free_after[i].append(v)

    @staticmethod
    def _unsupported(files: ModelOnDisk, name: str, what: str) -> WeightsCorruptError:
        return WeightsCorruptError.for_file(files.files[0].path, files.model, files.scale, f"layer {name}: {what} is not supported by the PyTorch backend")

    def _conv(self, files: ModelOnDisk, name: str, conf: dict[str, Any], used: set[str]) -> None:
        k = conf.get("kernel_size", [3, 3])
        if conf.get("strides", [1, 1]) != [1, 1] or conf.get("dilation_rate", [1, 1]) != [1, 1] or conf.get("groups", 1) != 1:
            raise self._unsupported(files, name, "a strided, dilated or grouped convolution")
        if k[0] != k[1] or k[0] % 2 != 1:
            raise self._unsupported(files, name, f"kernel {k}")
        if conf.get("activation", "linear") != "linear":
            raise self._unsupported(files, name, f"fused activation {conf.get('activation')!r}")
        pad = {"same": k[0] // 2, "valid": 0}.get(conf.get("padding", "valid"))
        if pad is None:
            raise self._unsupported(files, name, f"padding {conf.get('padding')!r}")
        kernel = files.weights.get(f"{name}/kernel")
        if kernel is None:
            raise WeightsCorruptError.for_file(files.files[0].path, files.model, files.scale, f"no weights for layer {name} ({name}/kernel)")
        kh, kw, cin, cout = kernel.shape
        conv = nn.Conv2d(cin, cout, (kh, kw), padding=pad, bias=bool(conf.get("use_bias", True)))
        with torch.no_grad():
            conv.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))))
            if conv.bias is not None:
                bias = files.weights.get(f"{name}/bias")
                if bias is None:
                    raise WeightsCorruptError.for_file(files.files[0].path, files.model, files.scale, f"no bias for layer {name}")
                conv.bias.copy_(torch.from_numpy(bias))
                used.add(f"{name}/bias")
        used.add(f"{name}/kernel")
        self.convs[name] = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v: dict[str, torch.Tensor] = {}
        for i, (kind, name, inputs, arg) in enumerate(self.ops):
            if kind == "input":
                y = x
            elif kind == "conv":
                conv = self.convs[name]
                if self.onednn:
                    y = torch.mkldnn_convolution(v[inputs[0]], conv.weight, conv.bias, conv.padding, conv.stride, conv.dilation, conv.groups)
                else:
                    y = conv(v[inputs[0]])
            elif kind == "relu":
                y = F.relu(v[inputs[0]])
            elif kind == "id":
                y = v[inputs[0]]
            elif kind == "cat":
                y = torch.cat([v[n] for n in inputs], dim=1)
            elif kind == "add":
                y = v[inputs[0]]
                for n in inputs[1:]:
                    y = y + v[n]
            elif kind == "mul":
                y = v[inputs[0]] * arg
            elif kind == "up":
                y = upsample_nearest_nchw(v[inputs[0]], arg)
            else:  # shuffle
                y = depth_to_space_nchw(v[inputs[0]], arg)
            v[name] = y
            for n in self.free_after[i]:
                v.pop(n, None)
        return v[self.output]


class TorchUpscaler:
    """One loaded ESRGAN model on a torch device: RGB bytes in, upscaled RGB bytes out, for a band
    of rows of some frames (the same contract as ``Upscaler`` of ``src/upscaler.ts``).

    On CUDA it runs float16 with ``channels_last`` memory; on CPU float32, every convolution on
    oneDNN whatever the batch (see the module doc). The byte conversion
    (scale, round half to even as tfjs's ``round``, clamp) runs on the device, so the copy back
    moves 3 bytes a pixel.
    """

    def __init__(self, files: ModelOnDisk, device: str | torch.device = "cpu", half: bool | None = None):
        self.files = files
        self.scale = files.scale
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        self.dtype = torch.float16 if (cuda if half is None else half) else torch.float32
        self.memory_format = torch.channels_last if cuda else torch.contiguous_format
        self.net = EsrganGraph(files).eval().to(self.device, dtype=self.dtype, memory_format=self.memory_format)
        # CPU float32: one convolution kernel for any batch, so a frame's bytes do not depend on
        # how many frames share its call (a split by frames is bit-identical to one rank).
        self.net.onednn = self.device.type == "cpu" and self.dtype == torch.float32 and torch.backends.mkldnn.is_available()
        r = MODEL_RANGE[files.model]
        # Byte -> input value, as the tfjs backend computes it (float64 product, stored as float32).
        lut = np.arange(256, dtype=np.float64) * (1.0 if r == 255 else 1.0 / 255.0)
        self._lut = torch.from_numpy(lut.astype(np.float32)).to(self.device)
        self._out_mul = 1.0 if r == 255 else 255.0
        self.fast: FixedShape | None = None

    def compile(self, mode: str, progress: Any = None, log: Any = None) -> FixedShape:
        """Runs the device part of :meth:`upscale` through ``reactor_worker.compile.FixedShape``
        (``mode``: auto, off, compile, graphs, both); returns it (``running``, ``fallback``)."""
        from reactor_worker.compile import FixedShape  # noqa: PLC0415 - only workers that compile need reactor_worker

        self.fast = FixedShape(self._core, mode=mode, device=self.device, progress=progress, log=log, name=f"ESRGAN {self.files.model}")
        return self.fast

    @torch.inference_mode()
    def upscale(self, frames: torch.Tensor, band: tuple[int, int, int, int] | None = None) -> torch.Tensor:
        """``frames``: uint8 ``[n, H, W, 3]`` (any device). ``band`` = ``(y0, y1, in0, in1)``:
        upscale output rows ``[y0, y1)`` reading input rows ``[in0, in1)`` (default: whole frames).
        Returns uint8 ``[n, (y1-y0)·s, W·s, 3]`` on this upscaler's device."""
        n, h, w, _ = frames.shape
        y0, y1, in0, in1 = band if band is not None else (0, h, 0, h)
        x = frames[:, in0:in1].to(self.device, non_blocking=True)
        if self.fast is not None:
            return self.fast(x, y0 - in0, y1 - in0)
        return self._core(x, y0 - in0, y1 - in0)

    def _core(self, x: torch.Tensor, r0: int, r1: int) -> torch.Tensor:
        """The device part: uint8 NHWC rows on the device -> upscaled uint8 NHWC output rows
        ``[r0·s, r1·s)`` (fixed shapes for a fixed input: what ``FixedShape`` compiles)."""
        s = self.scale
        x = self._lut[x.long()].permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels_last
        x = x.to(self.dtype).contiguous(memory_format=self.memory_format)
        y = self.net(x)[:, :, r0 * s : r1 * s]
        if self._out_mul != 1.0:
            y = y.float() * self._out_mul
        else:
            y = y.float()
        return torch.round(y).clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
