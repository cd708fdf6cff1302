"""Built-in cases; importing this package registers them.

The registry loads it through its own entry point (``conformance.cases``), first, as it loads any
case package: the registry (:mod:`conformance.api.case`) lies below the families that fill it.
The op sweep (:mod:`conformance.cases.ops`) registers lazily, when a pattern names its ids.

May import: ``conformance.api``, ``conformance.probes``, ``conformance.models``, ``conformance.util``.
"""

from conformance.cases import (
    changing_shapes,
    cuda_pools,
    custom_op,
    generated,
    mlp,
    modules,
    ops,
    regressions,
    while_loops,
)

__all__ = ["changing_shapes", "cuda_pools", "custom_op", "generated", "mlp", "modules", "ops", "regressions",
           "while_loops"]
