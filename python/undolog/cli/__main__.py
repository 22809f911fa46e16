"""``python -m undolog.cli``: the ``undolog`` command."""

import sys

from undolog.cli import main

sys.exit(main())
