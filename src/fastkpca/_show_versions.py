"""``fastkpca.show_versions()``: what a bug report needs to know about the installation.

Modelled on ``sklearn.show_versions``: Python and the platform, fastkpca and the versions of its
dependencies (required and optional), and the BLAS / OpenMP libraries loaded in the process as
threadpoolctl sees them (which library, its version, threading layer and thread count).
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from . import __version__

__all__ = ["show_versions"]

#: Distributions reported, by the name pip installs them under: required first, then the extras.
DEPENDENCIES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "threadpoolctl",
    "tqdm",
    "dask",
    "distributed",
    "matplotlib",
    "pyarrow",
    "pandas",
    "torch",
    "array-api-compat",
)


def _system_info() -> dict[str, str]:
    return {
        "python": sys.version.replace("\n", " "),
        "executable": sys.executable,
        "machine": platform.platform(),
    }


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _dependency_info() -> dict[str, str | None]:
    info: dict[str, str | None] = {"fastkpca": __version__}
    info.update((name, _version(name)) for name in DEPENDENCIES)
    return info


def _threadpool_info() -> list[dict]:
    import numpy  # noqa: F401  (loads the BLAS numpy links, so threadpoolctl can see it)
    import scipy.linalg  # noqa: F401  (scipy may bring its own)
    from threadpoolctl import threadpool_info

    return threadpool_info()


def show_versions(*, as_dict=False):
    """Print the versions of Python, fastkpca, its dependencies and the BLAS in use.

    Paste its output into a bug report: results of the randomized methods depend on the seed
    only, but their speed (and the last bits of their floats) depend on the BLAS library and
    its thread count.

    Parameters
    ----------
    as_dict : bool, default False
        Return the information as a dict (keys ``"system"``, ``"dependencies"``,
        ``"threadpools"``) instead of printing it.

    Returns
    -------
    dict or None
        With ``as_dict=True``: ``{"system": {...}, "dependencies": {name: version or None},
        "threadpools": [threadpoolctl.threadpool_info() entries]}``; a dependency that is not
        installed has version None.
    """
    info = {
        "system": _system_info(),
        "dependencies": _dependency_info(),
        "threadpools": _threadpool_info(),
    }
    if as_dict:
        return info
    width = max(len(k) for k in (*info["system"], *info["dependencies"])) + 1
    print("\nSystem:")
    for key, value in info["system"].items():
        print(f"{key:>{width}}: {value}")
    print("\nPython dependencies:")
    for key, value in info["dependencies"].items():
        print(f"{key:>{width}}: {value if value is not None else 'not installed'}")
    print("\nThreadpool libraries (threadpoolctl):")
    if not info["threadpools"]:
        print("  none loaded")
    for pool in info["threadpools"]:
        print()
        for key in (
            "user_api",
            "internal_api",
            "num_threads",
            "prefix",
            "filepath",
            "version",
            "threading_layer",
            "architecture",
        ):
            if key in pool:
                print(f"{key:>{width}}: {pool[key]}")
    return None
