"""The contracts: each turns models and measurements into a ``Check``.

``parity`` (values against the float64 reference), ``judge`` (peak, residual, program and
backward-input checks), ``blame`` (which storages explain an excess), ``timeline`` (a program
model against the measured allocations), ``baseline`` (growth against an earlier run, ``diff``),
``manifest`` (expected non-passes).

May import: ``conformance.output``, ``conformance.backends``, ``conformance.cases``, ``conformance.api``
and below.
"""
