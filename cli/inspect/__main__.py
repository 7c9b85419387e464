"""python -m pykubelet.cli.inspect: the same as the pykubelet-inspect console script."""

import sys

from . import main

sys.exit(main())
