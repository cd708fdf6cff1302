"""``python -m conformance``: the same as the ``conformance`` command."""

from conformance.launch import main

raise SystemExit(main())
