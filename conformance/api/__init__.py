"""The public API: what a backend adapter, a case package and a reader of results use.

``adapter`` (``Backend``, ``CompiledStep``), ``case`` (``Case``, ``Workload``, the registry),
``verdict`` (``Status``, ``Check``, ``combine``), ``result`` (``Result``, ``MemoryFigures``), ``step``
(running one step of a module), ``aot`` (the received-graph recorder for ``aot_autograd`` backends)
and ``pools`` (CUDA pool scenarios).

May import: ``conformance.probes``, ``conformance.models``, ``conformance.util``.
"""
