"""What a step really allocated, per memory domain.

``cpu`` (the torch CPU allocator's events: ``MemoryProbe``, ``MemoryTrace``), ``observer`` (the native
allocator observer that records them), ``hal`` (IREE HAL allocator statistics), ``cuda`` (the
CUDA caching allocator).

May import: ``conformance.models``, ``conformance.util``.
"""

# the workspace meter the kernel transient table measures LAPACK's queried workspace with
from conformance.probes import workspace as _workspace  # noqa: F401
