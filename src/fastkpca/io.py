"""Data in and out, in one import: the public names of two modules.

- :mod:`fastkpca.source.files`: streaming readers of data files (:func:`open_data`,
  :func:`read_data`, :func:`detect_format` and the reader classes), which yield row blocks of a
  ``.npy``, delimited text, Parquet or LIBSVM file;
- :mod:`fastkpca.persistence`: model files that load without pickle (:func:`save_model`,
  :func:`load`, :func:`load_model`, :func:`model_info`, :func:`is_model_file`).

This module only re-exports them, so ``fastkpca.io.open_data`` and ``fastkpca.io.load`` keep
working; fastkpca's own code imports from the two modules directly.
"""

from __future__ import annotations

from .persistence import (
    FORMAT_NAME,
    FORMAT_VERSION,
    is_model_file,
    load,
    load_model,
    model_info,
    save_model,
)
from .source.files import (
    DEFAULT_MAX_LINE_LENGTH,
    FORMATS,
    MAX_LIBSVM_INDEX,
    DataReader,
    LibsvmReader,
    NpyReader,
    ParquetReader,
    TextReader,
    detect_format,
    open_data,
    read_data,
)

__all__ = [
    "open_data",
    "read_data",
    "detect_format",
    "DataReader",
    "NpyReader",
    "TextReader",
    "ParquetReader",
    "LibsvmReader",
    "FORMATS",
    "DEFAULT_MAX_LINE_LENGTH",
    "MAX_LIBSVM_INDEX",
    "save_model",
    "load",
    "load_model",
    "model_info",
    "is_model_file",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]
