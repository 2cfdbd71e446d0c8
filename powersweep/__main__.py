import sys

from powersweep.cli import main

sys.exit(main())
