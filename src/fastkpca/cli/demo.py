"""``fastkpca demo``: every method on the embedded pendigits sample."""

from __future__ import annotations

import sys

from .._demo import DEMO_PLOT_SOFTWARE, run_demo
from ._common import CLIError, _claim_output


def _is_demo_plot(path) -> bool:
    """Whether ``path`` is a PNG written by ``fastkpca demo`` (its Software text chunk says so).

    Reads the PNG chunks before the image data only, at most 64 KiB: cheap on any file.
    """

    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    if not head.startswith(b"\x89PNG\r\n\x1a\n"):
        return False
    pos, marker = 8, b"Software\x00" + DEMO_PLOT_SOFTWARE.encode("latin-1")
    while pos + 8 <= len(head):
        length = int.from_bytes(head[pos : pos + 4], "big")
        kind = head[pos + 4 : pos + 8]
        if kind in (b"IDAT", b"IEND"):
            return False
        if kind == b"tEXt" and head[pos + 8 : pos + 8 + length] == marker:
            return True
        pos += 12 + length
    return False


def run(args):

    if not args.no_plot:
        replacing = _claim_output(
            args.output, force=args.force, kind="fastkpca demo plot", ours=_is_demo_plot
        )
        if replacing:
            print(replacing, file=sys.stderr)
    methods = args.methods.split(",") if args.methods else None
    rows = run_demo(
        output=None if args.no_plot else args.output,
        n_samples=args.n_samples,
        n_components=args.components,
        methods=methods,
        random_state=args.seed,
        device=args.device,
    )
    failed = [r["method"] for r in rows if r.get("error")]
    if failed:
        raise CLIError(f"demo: method(s) failed: {', '.join(failed)}")
    return 0
