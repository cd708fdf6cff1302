"""``python -m conformance.cli``: the subcommands without the launcher's early worker start."""

import sys

from conformance.cli.main import main

sys.exit(main())
