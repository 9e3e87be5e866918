"""The enhance app's PyTorch backend: the ``@upscalerjs`` ESRGAN graphs rebuilt as a PyTorch
module (:mod:`.esrgan`) from the npm package's files, read and checked by :mod:`.weights`."""

from .weights import MODEL_NAMES, ModelOnDisk, WeightsCorruptError, WeightsMissingError, read_model_files

__all__ = ["MODEL_NAMES", "ModelOnDisk", "WeightsCorruptError", "WeightsMissingError", "read_model_files"]
