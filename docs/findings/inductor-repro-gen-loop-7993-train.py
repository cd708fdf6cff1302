"""Repro: gen-loop-7993-train-shrunk on backend 'inductor': fail-peak.

measured peak 504 B > model peak 292 B (user-graph); alive past modelled death: aten::mul (64 B), aten::mul (32 B), aten::empty (32 B)

shrunk from gen-loop-7993-train: generated loop, 2 ops (blend, relu), float32, 1 carried, 0 trips
Written by torch-conformance (torch 2.13.0+cpu); run it with plain `python`: exit status 1 means the fault shows.
Program: {"family":"loop","train":true,"dtype":"float32","batch":2,"width":4,"n_inputs":2,"param_shapes":[[4,4],[4]],"ops":[],"outputs":[],"carried":1,"trips":0,"body":[{"kind":"relu","args":[3],"attrs":[]},{"kind":"blend","args":[0,2],"attrs":[]}],"body_out":[5],"data_cond":false}
"""

import copy
import sys

import torch

SEED = 7993
TRAIN = True
RTOL, ATOL = 0.0001, 1e-05
MODEL_PEAK_BYTES = 292  # lifetime model (user-graph)
MODEL_RESIDUAL_BYTES = 80
HARNESS_MEASURED = {'peak': 504, 'residual_per_step': [80, 80]}
EXACT = False  # exact backends must match the model byte for byte
PEAK_SLACK_BYTES = 0

# ---- the program, as plain torch ----
from torch._higher_order_ops.while_loop import while_loop

DTYPE = torch.float32


class Generated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p0 = torch.nn.Parameter(torch.randn(4, 4) / 4 ** 0.5)
        self.p1 = torch.nn.Parameter(torch.randn(4) * 0.1)

    def forward(self, x0, x1, steps):
        def cond(i, c0):
            return i < steps

        def body(i, c0):
            b4 = torch.relu(x1)
            b5 = torch.tanh(c0 + self.p1)
            return i + 1, b5
        _, *out = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x0))
        return out[0].square().mean() + self.p0.square().mean() + self.p1.square().mean()


def make_model():
    return Generated().to(DTYPE)


def make_inputs():
    return (torch.randn(2, 4).to(DTYPE), torch.randn(2, 4).to(DTYPE), torch.tensor(0),)



# ---- how the harness runs one step ------------------------------------------------------
def compile_step(model, inputs):
    """A function running one step on the backend; returns what the step leaves to drop."""
    # plain torch.compile, as `backend="inductor"` runs it
    compiled = torch.compile(model, backend="inductor", dynamic=False)
    return compiled


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
    events = []

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
    sizes = {}
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


def main():
    torch.manual_seed(SEED)
    model = make_model()
    inputs = make_inputs()
    model.train(TRAIN)
    faults = []

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
            faults.append(f"{name} differs from the float64 reference (max abs err {err:.3g})")

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
                faults.append(f"peak {peak} B {'!=' if EXACT else '>'} model peak {MODEL_PEAK_BYTES} B"
                              + (f" + slack {PEAK_SLACK_BYTES} B" if PEAK_SLACK_BYTES else ""))
            if residual != MODEL_RESIDUAL_BYTES:
                faults.append(f"residual {residual} B != model residual {MODEL_RESIDUAL_BYTES} B")
    if faults:
        print("FAULT: " + "; ".join(dict.fromkeys(faults)))
        sys.exit(1)
    print("no fault: the step matches the reference and the lifetime model")


if __name__ == "__main__":
    main()
