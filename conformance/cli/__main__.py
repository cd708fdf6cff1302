"""``python -m conformance.cli``: the subcommands without the launcher's early worker start."""

import sys

from conformance.cli.launch import imported, importing, interruptible


def _cli() -> int:
    previous = importing()  # torch and pytest: a Ctrl-C meanwhile is one line, exit 130
    try:
        from conformance.cli.main import main
    finally:
        imported(previous)
    return main()


sys.exit(interruptible(_cli))
