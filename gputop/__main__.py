"""``python -m gputop``: the ``gputop`` command (gputop.cli), for an environment without its script on PATH."""

import sys

from gputop.cli import main

sys.exit(main())
