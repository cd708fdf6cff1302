"""Built-in backend adapters.  They register through the same entry points as plugins.

One module per backend, independent of each other and of the case families.

May import: ``conformance.api``, ``conformance.probes``, ``conformance.models``, ``conformance.util``.
"""
