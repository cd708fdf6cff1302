"""Custom ops used by generated cases.  Plain torch only: repro scripts embed this file's source.

``twin`` returns two tensors; ``accum`` also mutates an argument (a buffer made
inside the model).  Both allocate nothing but their outputs, so their internals
cannot blur the lifetime model; ``twin`` has an autograd formula.  torch.library
refuses autograd formulas for mutating ops, so training programs call ``accum``
on a detached input.
"""

import types

import torch


def twin_impl(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + x, torch.tanh(x)


twin = torch.library.custom_op("conformance_gen::twin", mutates_args=())(twin_impl)


@twin.register_fake
def _twin_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


def _twin_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ctx.save_for_backward(output[1])


def _twin_backward(ctx, g_double, g_tanh):  # type: ignore[no-untyped-def]
    (t,) = ctx.saved_tensors
    return g_double + g_double + g_tanh * (1 - t * t)


twin.register_autograd(_twin_backward, setup_context=_twin_setup)


def accum_impl(x: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Adds ``x`` into ``acc`` in place; returns two tensors computed from ``x`` alone."""
    acc.add_(x)
    return x + x, x * x


accum = torch.library.custom_op("conformance_gen::accum", mutates_args=("acc",))(accum_impl)


@accum.register_fake
def _accum_fake(x: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


#: the ops' bodies called as plain functions (same results, same errors): a shape check of a program calls
#: these, because a custom op's first call imports ``torch._dynamo`` (its kernel is wrapped to disable it)
plain = types.SimpleNamespace(twin=twin_impl, accum=accum_impl)
