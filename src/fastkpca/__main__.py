"""``python -m fastkpca``: the same as the ``fastkpca`` command."""

import sys

from .cli import main

sys.exit(main())
