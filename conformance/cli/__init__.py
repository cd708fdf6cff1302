"""The ``conformance`` command.

``launch`` (the console script: starts the isolation worker early, then the CLI), ``main`` (the
subcommands: run, list, report, merge, diff, repro).

May import: every other layer.
"""
