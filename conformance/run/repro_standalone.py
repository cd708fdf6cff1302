"""The standalone repro script's runner, a module ruff and mypy check.

:mod:`conformance.run.repro` copies this module's text from the marker line below into each
standalone script, after the settings, the program and its inputs it writes there, and puts the
backend's own compile step between the ``compile body`` markers.  The names above the marker
stand in for what the script defines; nothing imports this module.
"""

import copy
import sys

import torch

TRAIN = False
SEED = 0
RTOL = ATOL = 0.0
MODEL_PEAK_BYTES: int | None = None
MODEL_RESIDUAL_BYTES: int | None = None
EXACT = False
PEAK_SLACK_BYTES = 0
FAILED_CHECK: str | None = None
FAILED_STATUS = ""


def make_model() -> torch.nn.Module:
    raise NotImplementedError("the script's program defines it")


def make_inputs() -> tuple[torch.Tensor, ...]:
    raise NotImplementedError("the script's program defines it")

# ---- copied into the script from here ----

# ---- how the harness runs one step ------------------------------------------------------
def compile_step(model, inputs):
    """A function running one step on the backend; returns what the step leaves to drop."""
    # <compile body>: the harness writes the backend's own here
    return torch.compile(model, backend="inductor", dynamic=False)
    # </compile body>


def run_step(call, model, inputs):
    if not TRAIN:
        with torch.no_grad():
            return call(*inputs)
    loss = call(*inputs)
    loss.backward()  # gradients stay on .grad, as in a training loop
    return loss.detach()


def measure(step, model):
    """Peak and residual bytes of the torch CPU allocator during one step (outputs dropped inside)."""
    import gc

    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    for p in model.parameters():
        p.grad = None
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = step()
        del out
    events: list[tuple[int, int, int]] = []

    def walk(event):
        kind, fields = event.typed
        if kind == _EventType.Allocation:
            if fields.device.type == "cpu":
                events.append((event.start_time_ns, fields.ptr, fields.alloc_size))
            return
        for child in event.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    live = peak = 0
    sizes: dict[int, int] = {}
    for _, ptr, size in sorted(events):
        if size > 0:
            sizes[ptr] = size
            live += size
        elif ptr in sizes:  # frees of memory allocated before the window do not count
            live -= sizes.pop(ptr)
        peak = max(peak, live)
    return peak, live


def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in flat(o)]


def named_results(out, model):
    named = {f"output[{i}]": t.detach() for i, t in enumerate(flat(out))}
    if TRAIN:
        named.update({f"grad[{n}]": p.grad.detach() for n, p in model.named_parameters() if p.grad is not None})
    return named


def check_step():
    """Every check this script can make: {check name: [faults]} (an empty list: the check passed)."""
    torch.manual_seed(SEED)
    model = make_model()
    inputs = make_inputs()
    model.train(TRAIN)
    faults: dict[str, list[str]] = {"parity": [], "peak": [], "residual": []}

    # parity against the float64 reference, run eagerly
    ref_model = copy.deepcopy(model).double()
    ref_inputs = tuple(t.double() if t.is_floating_point() else t.clone() for t in inputs)
    reference = named_results(run_step(ref_model, ref_model, ref_inputs), ref_model)
    call = compile_step(model, inputs)
    got = named_results(run_step(call, model, inputs), model)
    for name, ref in reference.items():
        ok = name in got and torch.allclose(got[name].double(), ref, rtol=RTOL, atol=ATOL, equal_nan=True)
        err = (got[name].double() - ref).abs().max().item() if name in got else float("inf")
        print(f"parity {name}: max_abs_err {err:.3g} (rtol {RTOL}, atol {ATOL}) {'ok' if ok else 'MISMATCH'}")
        if not ok:
            faults["parity"].append(f"{name} differs from the float64 reference (max abs err {err:.3g})")

    # memory: warm step, then two measured steps, as the harness does
    for p in model.parameters():
        p.grad = None
    del got
    out = run_step(call, model, inputs)
    del out
    if MODEL_PEAK_BYTES is not None:
        for step_no in range(2):
            peak, residual = measure(lambda: run_step(call, model, inputs), model)
            print(f"step {step_no}: peak {peak} B (model {MODEL_PEAK_BYTES} B), "
                  f"residual {residual} B (model {MODEL_RESIDUAL_BYTES} B)")
            if (peak != MODEL_PEAK_BYTES) if EXACT else (peak > MODEL_PEAK_BYTES + PEAK_SLACK_BYTES):
                faults["peak"].append(f"peak {peak} B {'!=' if EXACT else '>'} model peak {MODEL_PEAK_BYTES} B"
                                      + (f" + slack {PEAK_SLACK_BYTES} B" if PEAK_SLACK_BYTES else ""))
            if residual != MODEL_RESIDUAL_BYTES:
                faults["residual"].append(f"residual {residual} B != model residual {MODEL_RESIDUAL_BYTES} B")
    return faults


def main():
    try:
        faults = check_step()
    except Exception as exc:
        if FAILED_CHECK is not None:
            raise  # the repro is for a check, not for an error: an error here is something else
        import traceback

        traceback.print_exc()
        print(f"FAULT: {FAILED_STATUS}: {type(exc).__name__}: {exc}")
        sys.exit(1)
    if FAILED_CHECK is None and FAILED_STATUS in ("fail-compile", "fail-run"):
        print(f"no fault: the step compiled and ran (the harness saw {FAILED_STATUS})")
        return
    checked = [FAILED_CHECK] if FAILED_CHECK is not None else list(faults)
    failing = [f for name in checked for f in faults.get(name, [])]
    others = [f for name, fs in faults.items() if name not in checked for f in fs]
    if others:
        print("also (not the check this repro is for): " + "; ".join(dict.fromkeys(others)))
    if failing:
        print(f"FAULT ({FAILED_CHECK or 'any check'}): " + "; ".join(dict.fromkeys(failing)))
        sys.exit(1)
    print(f"no fault: the {FAILED_CHECK or 'parity, peak and residual'} check passes")


if __name__ == "__main__":
    main()
