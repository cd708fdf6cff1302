"""What a run leaves behind, and the readers of it.

``records`` (reading ``results.jsonl`` against its schema), ``outdir`` (the output directory, its
lock and atomic publishing), ``history`` (the run history database), ``report`` (the HTML report),
``summary`` (the terminal table), ``merge`` (combining shards), ``version_matrix`` (results of
several torch releases side by side).

May import: ``conformance.backends``, ``conformance.cases``, ``conformance.api`` and below.
"""
