"""``python -m conformance``: the same as the ``conformance`` command."""

from conformance.cli.launch import main

raise SystemExit(main())
