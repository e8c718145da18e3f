import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FASTKPCA_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def align_signs(A, B):
    """B with its columns' signs flipped to match A."""
    s = np.sign(np.sum(A * B, axis=0))
    s[s == 0] = 1
    return B * s


def rel_err(A, B):
    """max |A - B| / max |A| after aligning column signs."""
    A = np.asarray(A, dtype=np.float64)
    B = align_signs(A, np.asarray(B, dtype=np.float64))
    return float(np.max(np.abs(A - B)) / np.max(np.abs(A)))


def spectrum_matrix(vals, seed=0):
    """The symmetric matrix ``Q diag(vals) Q^T`` with a random orthogonal Q, and Q."""
    import scipy.linalg as la

    n = len(vals)
    Q, _ = la.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return (Q * vals) @ Q.T, Q


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: skipped with the reason where there is none (CI
    has none; they run on a GPU machine with ``-m gpu``)."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (PyTorch sees none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
