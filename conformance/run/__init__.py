"""A run: from options to verdicts.

``options`` (the one option table), ``plugin`` (the light ``pytest11`` entry point), ``runner``
(the hooks that make pairs into items and verdicts into results), ``suite`` (the collected test),
``stats`` (how a session ended), ``engine`` (one pair: compile, reference, probe, models,
checks), ``isolation`` (the worker process), ``sharding``, ``repro`` (repro scripts and shrinking).

May import: every layer below it (``conformance.checks`` down).
"""
