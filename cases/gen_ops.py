"""Custom ops used by generated cases.  Plain torch only: repro scripts embed this file's source.

``twin`` returns two tensors; ``accum`` also mutates an argument (a buffer made
inside the model).  Both allocate nothing but their outputs, so their internals
cannot blur the lifetime model; ``twin`` has an autograd formula.  torch.library
refuses autograd formulas for mutating ops, so training programs call ``accum``
on a detached input.
"""

import torch


@torch.library.custom_op("conformance_gen::twin", mutates_args=())
def twin(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + x, torch.tanh(x)


@twin.register_fake
def _twin_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


def _twin_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ctx.save_for_backward(output[1])


def _twin_backward(ctx, g_double, g_tanh):  # type: ignore[no-untyped-def]
    (t,) = ctx.saved_tensors
    return g_double + g_double + g_tanh * (1 - t * t)


twin.register_autograd(_twin_backward, setup_context=_twin_setup)


@torch.library.custom_op("conformance_gen::accum", mutates_args=("acc",))
def accum(x: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Adds ``x`` into ``acc`` in place; returns two tensors computed from ``x`` alone."""
    acc.add_(x)
    return x + x, x * x


@accum.register_fake
def _accum_fake(x: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)
