"""``python -m intact.tracking``: the command line of :mod:`intact.tracking.cli`."""

import sys

from intact.tracking.cli import main

sys.exit(main())
