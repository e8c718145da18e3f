"""Data in and out, in one import: the public names of two modules.

- :mod:`fastkpca.source.files`: streaming readers of data files (:func:`open_data`,
  :func:`read_data`, :func:`detect_format` and the reader classes), which yield row blocks of a
  ``.npy``, delimited text, Parquet or LIBSVM file;
- :mod:`fastkpca.persistence`: model files that load without pickle (:func:`save_model`,
  :func:`load`, :func:`load_model`, :func:`model_info`, :func:`is_model_file`).

This module only re-exports them (their ``__all__``), so ``fastkpca.io.open_data`` and
``fastkpca.io.load`` keep working; fastkpca's own code imports from the two modules directly.
"""

from __future__ import annotations

from . import persistence
from .persistence import *  # noqa: F403
from .source import files
from .source.files import *  # noqa: F403

__all__ = [*files.__all__, *persistence.__all__]
