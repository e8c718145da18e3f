"""What every command shares: one-line errors and warnings, signals, argument values, and the
rule that no command overwrites a file it did not write."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import warnings
from pathlib import Path

from ..execution import using_n_jobs

#: The model file ``fit`` writes without ``-o`` (a model file is a NumPy ``.npz`` archive).
DEFAULT_MODEL = "model.npz"

#: How long ``fastkpca bench --quick`` takes, as measured (said in its help): 18 scripts in
#: 17.7 minutes on a 2-core machine whose load average was 2.5-3.8 (other work running).
BENCH_QUICK_TIME = "about 18 minutes on a 2-core machine"

#: ``bench --out``'s default: a folder of the current directory, never the package or the
#: repository's own ``benchmarks/results/``.
DEFAULT_BENCH_OUT = "fastkpca-bench-results"


class CLIError(Exception):
    """An error reported to the user as one line."""


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the command is, so that cleanup runs (``finally``
    blocks, the removal of temporary output files) and the command exits with 128 + signal.

    A BaseException, like KeyboardInterrupt: ``except Exception`` does not swallow it.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once
    raise _Terminated(signum)


@contextlib.contextmanager
def _signals_end_like_errors():
    """Within the block, SIGTERM and SIGHUP (where the platform has it) raise
    :class:`_Terminated`; a signal that was ignored (``nohup``) stays ignored.  Outside the
    main thread signals cannot be handled, and the block runs as it is."""
    installed = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is None or signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            installed[signum] = signal.signal(signum, _raise_terminated)
        except ValueError:  # not the main thread
            break
    try:
        yield
    finally:
        for signum, previous in installed.items():
            signal.signal(signum, previous)


def _parse_value(text: str):
    """A command-line value: int, float, true/false/none, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _parse_gamma(text: str):
    if text in ("scale", "median"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"gamma must be a number, 'scale' or 'median', got {text!r}"
        ) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parse_column(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def _parse_bool(text: str) -> bool:
    value = _parse_value(text)
    if not isinstance(value, bool):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _parse_size(text: str):
    """A size option: a positive integer or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or 'auto', got {text!r}"
        ) from None


def _progress_enabled(args) -> bool:
    """Whether the command shows its progress on stderr (a bar on a terminal, else a line every
    few seconds): unless ``--quiet``."""
    return not getattr(args, "quiet", False)


#: The input files of each command (argument name -> what it is), checked before the command's
#: module is imported, so that a mistyped name is answered at once.
_INPUTS = {
    "fit": {"data": "data"},
    "transform": {"model": "model", "data": "data"},
    "evaluate": {"model": "model", "data": "data"},
    "info": {"model": "model"},
}


def _check_inputs_exist(args) -> None:
    """Refuse a command whose input file does not exist (the readers' own message)."""
    for name, what in _INPUTS.get(args.command, {}).items():
        path = getattr(args, name, None)
        if path is not None and not os.path.exists(path):
            raise FileNotFoundError(f"{what} file not found: {path}")


def _same_file(a, b) -> bool:
    """Whether two paths name one file (the same path, a link to it, or the same inode)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return os.path.realpath(a) == os.path.realpath(b)


def _check_output(output, **inputs):
    """Refuse an output path that names one of the command's input files."""
    for what, path in inputs.items():
        if path is not None and _same_file(output, path):
            raise CLIError(
                f"-o {output} is the {what} file {path}: writing it would destroy the input; "
                "choose another output name"
            )


def _claim_output(path, *, force: bool, kind: str | None = None, ours=None) -> str | None:
    """Check that the command may write ``path``; the stderr line to print if it replaces a file.

    A name that does not exist yet is free (a dangling link too: its target is created) when
    the folder it goes into exists; a missing folder is named (the link's, for a link).  An
    existing regular file is replaced only when ``ours(path)`` recognises it as what the
    command writes (``kind``: "fastkpca model" for ``fit``), or with ``--force``; anything else
    (a folder, a device such as /dev/null, a pipe) is never replaced.  Called before the work,
    so a refusal costs nothing, and again just before the file is replaced.
    """
    target = Path(path)
    if not target.exists():
        folder = Path(os.path.realpath(path)).parent
        if not folder.is_dir():
            link = f" ({path} is a link to {os.readlink(path)})" if target.is_symlink() else ""
            raise CLIError(f"output {path}: folder {folder} does not exist{link}")
        return None
    if target.is_dir():
        raise CLIError(f"output {path} is a folder; give a file name (-o FILE)")
    if not target.is_file():
        raise CLIError(f"output {path} is not a regular file; fastkpca writes only files")
    if ours is not None and ours(target):
        return f"fastkpca: replacing the {kind} {path}"
    if force:
        return f"fastkpca: replacing {path} (--force)"
    what = f"exists and is not a {kind}" if kind else "exists"
    raise CLIError(
        f"output {path} {what}: fastkpca does not overwrite files it did not write; choose "
        "another name with -o, or give --force to replace it"
    )


def _jobs_context(args):
    """The command's threads (``--jobs``) as the execution layer's context: estimators with
    ``n_jobs=None`` (fitted here, or loaded) run with that many."""

    jobs = getattr(args, "jobs", None)
    return contextlib.nullcontext() if jobs is None else using_n_jobs(jobs)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, MemoryError):
        return "out of memory" + (f" ({text})" if text else "")
    if isinstance(exc, KeyError):
        return f"missing key {text}"
    return text or type(exc).__name__


@contextlib.contextmanager
def _warnings_as_lines():
    """Within the block, each warning (``fastkpca.kernels.DegenerateKernelWarning``, ...) is
    printed as one line ``fastkpca: warning: ...`` on stderr, without Python's file and line."""

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split()) or category.__name__
        print(f"fastkpca: warning: {text}", file=sys.stderr)

    saved = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved
