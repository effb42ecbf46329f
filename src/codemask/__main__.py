"""``python -m codemask``: the ``codemask`` command, for an interpreter whose scripts are not on PATH."""

import sys

from codemask.cli import main

sys.exit(main())
