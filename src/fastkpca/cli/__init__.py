"""The ``fastkpca`` command (also ``python -m fastkpca``).

::

    fastkpca fit DATA --method nystrom --components 5 --kernel rbf --gamma 0.01 -o model.npz
    fastkpca transform model.npz DATA -o projections.npy
    fastkpca evaluate model.npz DATA
    fastkpca info model.npz
    fastkpca bench [--quick] [--out DIR] [NAME ...]
    fastkpca demo [--output fastkpca-demo.png]

DATA is a file read by :mod:`fastkpca.source.files`.  The block-wise methods are fitted on the
file's row blocks without loading it (reading it again for a second pass); the others read it
into memory.  Errors and the library's warnings are one line each on stderr (exit status 1 for
an error); ``--debug`` shows tracebacks and Python's warnings.  Every option's help is built
from the estimators themselves, so it cannot drift from what the code accepts.

No command overwrites a file it did not write (``fit`` only a fastkpca model,
:func:`fastkpca.persistence.is_model_file`; ``demo`` its own plot; ``bench`` the files it
recorded; ``transform`` none) unless ``--force``; ``-o`` naming an input is always refused.
Outputs are written to a temporary file renamed at the end; SIGTERM and SIGHUP end the command
like an error (exit status 128 + the signal), removing it.  A model file records its training
file's column names, label column and LIBSVM numbering, by which ``transform`` and ``evaluate``
select DATA's columns.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys

from .._utils import DEFAULT_BLOCK_ROWS
from ..decomposition import METHODS
from ..execution.progress import heartbeat
from ._common import (
    _check_inputs_exist,
    _jobs_context,
    _one_line,
    _signals_end_like_errors,
    _Terminated,
    _warnings_as_lines,
)
from ._parser import build_parser

__all__ = ["main", "build_parser", "METHODS"]


def _heartbeat(args):
    """A commands that reads DATA says, in a log, that it is still at work every few seconds
    when nothing else was said (its imports and the steps without progress of their own)."""
    data = getattr(args, "data", None)
    if data is None:
        return contextlib.nullcontext()
    return heartbeat(f"fastkpca {args.command} {data}", enabled=not args.quiet)


def main(argv=None) -> int:
    """Entry point of the ``fastkpca`` command; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = []
    if "--" in argv:  # `fastkpca bench NAME -- ARGS`: ARGS go to the benchmark scripts
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if script_args and args.command != "bench":
        parser.error("arguments after -- are passed to benchmark scripts: only for bench")
    args.script_args = script_args
    if getattr(args, "block_rows", 0) is None:
        args.block_rows = DEFAULT_BLOCK_ROWS
    try:
        with (
            _signals_end_like_errors(),
            contextlib.nullcontext() if args.debug else _warnings_as_lines(),
            _jobs_context(args),
        ):
            _check_inputs_exist(args)
            with _heartbeat(args):
                # the command's module, imported only now: --help and argument errors need none
                command = importlib.import_module(f"{__name__}.{args.command}")
                return int(command.run(args) or 0)
    except _Terminated as exc:
        print(f"fastkpca: terminated by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("fastkpca: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (e.g. `fastkpca info m.npz | head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        if args.debug:
            raise
        print(f"fastkpca: error: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
