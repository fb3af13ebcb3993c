"""``python -m producers``: see :mod:`producers.cli`."""

import sys

from producers.cli import main

sys.exit(main())
