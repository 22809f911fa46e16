"""``python -m undolog.demos``: the four stories of ``make demo``."""

import sys

from undolog.demos.stories import main

sys.exit(main())
