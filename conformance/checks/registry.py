"""The built-in checks, registered: each one object (:class:`~conformance.api.verdict.CheckSpec`).

A check's judging lives in its own module (``judge``, ``parity``, ``baseline``, ``loop_scaling``);
its object here says the rest: its place in the verdict's order, what it reads, its cause
vocabulary (:mod:`conformance.checks.cause`) and whether a standalone repro shows it.  The
engine, :func:`~conformance.api.verdict.combine`, the results schema's enum, triage and repro all
read the registry, so adding a check is one module (its ``CHECK``) and one line in :data:`BUILTIN`.
The registry imports this module by name on its first use.
"""

from __future__ import annotations

from conformance.api.verdict import Check, CheckName, CheckSpec, register_check
from conformance.checks import cause, domains, loop_scaling, outputs
from conformance.checks.context import Judging
from conformance.checks.judge import adapter_check, judge_backward_inputs, judge_peak, judge_program, judge_residual
from conformance.checks.parity import parity_check


def _parity(j: Judging) -> Check:
    return parity_check(j.parity)


def _outputs(j: Judging) -> Check | None:
    return outputs.outputs_check(j.kept_outputs)


def _residual(j: Judging) -> Check:
    return judge_residual(j.steps, j.held_by)


def _program(j: Judging) -> Check | None:
    return judge_program(j.steps, j.exact_domain)


def _peak(j: Judging) -> Check:
    return judge_peak(j.steps, j.exact, j.slack, j.source, j.program_held, j.held_by)


def _backward_inputs(j: Judging) -> Check | None:
    return judge_backward_inputs(j.memory())


def _pool(j: Judging) -> Check | None:
    return adapter_check(j.adapter_check())


PARITY = CheckSpec(CheckName.PARITY, 10, "each checked call's outputs and gradients against the float64 reference",
                   _parity, cause.parity_findings, standalone=True)
OUTPUTS = CheckSpec(outputs.NAME, 15, "the outputs the caller kept from the unprobed calls, after every later call, "
                    "against the copies taken when each returned", _outputs, outputs.cause)
RESIDUAL = CheckSpec(CheckName.RESIDUAL, 20, "live bytes after each probed call against the model's residual",
                     _residual, cause.residual_findings, standalone=True)
PROGRAM = CheckSpec(CheckName.PROGRAM, 30, "the generated program's own lifetimes, and the measured timeline "
                    "against it where every allocation is reported", _program, cause.program_findings)
PEAK = CheckSpec(CheckName.PEAK, 40, "each probed call's measured peak against the model's",
                 _peak, cause.peak_findings, standalone=True)
BACKWARD_INPUTS = CheckSpec(CheckName.BACKWARD_INPUTS, 50, "the saved activations the backend reports "
                            "(memory.findings' backward_inputs)", _backward_inputs)
POOL = CheckSpec(CheckName.POOL, 60, "the adapter's own contract (CompiledStep.contract_check: CUDA graph pools)",
                 _pool)
BASELINE = CheckSpec(CheckName.BASELINE, 70, "a pair's measured peak and residual against an earlier run's "
                     "(made by --baseline and diff, not by the engine)")

#: every built-in check; the registry orders them by precedence
BUILTIN: tuple[CheckSpec, ...] = (PARITY, OUTPUTS, domains.CHECK, RESIDUAL, PROGRAM, PEAK, loop_scaling.CHECK,
                                  BACKWARD_INPUTS, POOL, BASELINE)

for _spec in BUILTIN:
    register_check(_spec)
