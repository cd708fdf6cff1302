"""Built-in cases; importing this package registers them."""

from conformance.cases import custom_op, generated, mlp, regressions, while_loops

__all__ = ["custom_op", "generated", "mlp", "regressions", "while_loops"]
