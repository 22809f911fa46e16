import sys

from undolog.dashboard.server import main

sys.exit(main())
