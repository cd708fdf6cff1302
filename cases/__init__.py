"""Built-in cases; importing this package registers them."""

from conformance.cases import cuda_pools, custom_op, generated, mlp, regressions, while_loops

__all__ = ["cuda_pools", "custom_op", "generated", "mlp", "regressions", "while_loops"]
