"""``python -m fakegpu``: the same as the ``fakegpu`` command."""

import sys

from fakegpu.cli.main import main

sys.exit(main())
