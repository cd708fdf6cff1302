"""One line for each name a verdict quotes: the models a step is held to and the memory domains it
is measured in.  docs/usage.md, the report (a hover and a legend) and ``results-schema.md`` say the same
words, so ``user-kernels`` or ``combined`` is explained wherever a reader meets it."""

from __future__ import annotations

#: the model a step's memory is held to (``memory.model_source`` and the reasons that quote it)
MODELS: dict[str, str] = {
    "user-graph": "the step as the user wrote it, traced to one ATen graph, each value dropped at its last use",
    "user-kernels": "the step as eager PyTorch runs it with the user's kernels (modules a compiler leaves to "
                    "eager, such as an LSTM, with their kernels' own workspaces): held where the compiled "
                    "graphs do not cover the whole step",
    "received-graphs": "the forward and backward graphs the backend was handed (after AOTAutograd's "
                       "partition), each value dropped at its last use: what the compiler needed at most",
    "split-graphs": "a step Dynamo split into graphs and eager code: each graph it compiled, as received, in the "
                    "order the call ran them, with what crossed between them held as the split program holds it "
                    "(the frame to the forward's end, the autograd context to its backward)",
    "program": "the program the backend generated (inductor's wrapper): every buffer it allocates, reuses "
               "and frees, in kernel order; the measured allocations must follow it exactly",
    "optimizer": "the optimizer's step and zero_grad, recorded from the real optimizer, appended to the "
                 "step's model on every probed call",
}

#: the allocator a figure was measured in (``memory.domain`` and ``memory.domains``)
DOMAINS: dict[str, str] = {
    "torch-cpu": "torch's CPU allocator: every tensor torch allocates on the host",
    "iree-hal": "IREE's HAL allocator (local-sync driver): the buffers a compiled IREE program allocates "
                "for its results, transients and input copies",
    "combined": "the sum of the domains a step allocates in, sample by sample (torch-cpu + iree-hal for "
                "IREE): the verdict's figures when a backend allocates outside torch",
    "cuda-caching-allocator": "torch's CUDA caching allocator: bytes requested, private graph pools included",
    "native": "every library's own heap (malloc, aligned allocations, operator new, anonymous mmap) outside "
              "torch and the interpreter: numpy's arrays, a runtime's buffers; recorded in the isolation workers",
}


#: the names records spell otherwise (the program check's headline reads "generated program")
ALIASES: dict[str, str] = {"generated program": "program", "user-level": "user-graph"}


def explain(name: str) -> str:
    """The line for a model or domain name, or ``""`` for a name this glossary does not know."""
    name = ALIASES.get(name, name)
    return MODELS.get(name) or DOMAINS.get(name, "")
