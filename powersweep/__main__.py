"""``python -m powersweep``: the CLI, as the ``powersweep`` command."""

import sys

from powersweep.cli import main

sys.exit(main())
