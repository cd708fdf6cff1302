"""How long ATen's C++ RNN composites keep what they make: the scopes of aten/src/ATen/native/RNN.cpp.

``aten::gru``, ``aten::rnn_tanh``, ``aten::rnn_relu`` (and ``aten::lstm`` where oneDNN does not run
it) are C++ functions over ATen ops: a traced graph has their ops, not their scopes.  A value a C++
function makes lives until the scope that holds it ends, not to its last use.  RNN.cpp's scopes:

* ``apply_layer_stack`` (the whole call): the unbound initial hidden states, each layer's output
  (``layer_input``, reassigned only after the next layer returns), the final hidden states and
  their ``stack``: held until the call returns;
* ``FullLayer::operator()`` (one layer and direction): on the CPU the input projected for the whole
  sequence at once (``inputs_w = params.linear_ih(inputs)``) and its ``unbind`` into steps, the
  ``step_outputs`` vector, then their ``stack``; ``FullBidirectionalLayer`` keeps the reversed
  input and both directions' outputs until their ``cat``: held until the layer's stack and the
  glue after it (the next layer's first op, or the call's end);
* the cell (one step): its temporaries (the hidden projection, the gates) die when it returns
  its new hidden state.

In a graph, a layer ends at a ``stack`` of step outputs all made after the previous layer ended
(the final hidden states' ``stack`` takes outputs of earlier layers: not a layer's); its steps
end at those step outputs, in order; its steps begin after its first ``unbind`` (the sequence
split into steps).  :func:`composite_holds` gives, for every value the call made, the node it is
held until at least: the end of its step when every use is in that step, else the end of its
layer's glue, and the call's end for what no layer made.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten

#: the ``torch._VF`` functions whose C++ bodies are RNN.cpp's layer stacks
COMPOSITES = frozenset({"gru", "rnn_tanh", "rnn_relu", "lstm"})


def composite_holds(made: list[torch.fx.Node]) -> dict[torch.fx.Node, torch.fx.Node]:
    """For each node of one composite call (``made``, in graph order), the node its value is held until."""
    if not made:
        return {}
    index = {n: i for i, n in enumerate(made)}
    layers: list[tuple[int, int, list[int]]] = []  # (first node, stack node, step outputs) by index
    previous_end = -1
    for i, node in enumerate(made):
        if node.target is not aten.stack.default or not isinstance(node.args[0], (list, tuple)):
            continue
        outputs = [index.get(a, -1) if isinstance(a, torch.fx.Node) else -1 for a in node.args[0]]
        if outputs and all(o > previous_end for o in outputs):
            layers.append((previous_end + 1, i, sorted(outputs)))
            previous_end = i
    end = made[-1]
    holds = dict.fromkeys(made, end)  # the call's scope, unless a layer's is narrower
    for k, (first, stack, steps) in enumerate(layers):
        glue_end = made[layers[k + 1][0] - 1] if k + 1 < len(layers) else end
        split = next((i for i in range(first, steps[0] + 1) if made[i].target is aten.unbind.int), first - 1)
        for i in range(first, stack):
            node = made[i]
            holds[node] = glue_end
            if i <= split:
                continue  # the layer's own locals: the projected input and its steps
            step = next((s for s in steps if s >= i), None)  # None: after the last step, before the stack
            uses = [index.get(u, len(made)) for u in node.users]
            if step is not None and all(u <= step for u in uses):
                holds[node] = made[step]
    return holds


def onednn_holds(made: list[torch.fx.Node]) -> dict[torch.fx.Node, torch.fx.Node]:
    """For each node of one ``aten::lstm`` call that oneDNN runs (RNN.cpp's ``mkldnn_rnn`` in
    native/mkldnn), the node its value is held until: a layer's output (``layer_output[direction]``)
    until the next layer's call for that direction has returned (it is reassigned then), the two
    directions' ``cat`` (``layer_input``) until the next layer's ``cat``, everything else (the
    contiguous input and states, their per-layer views, the per-layer final states) until the call
    returns."""
    if not made:
        return {}
    end = made[-1]
    holds = dict.fromkeys(made, end)
    layers = [n for n in made if n.target is aten.mkldnn_rnn_layer.default]
    if not layers:
        return holds
    directions = 2 if bool(layers[0].args[13]) else 1
    for k, call in enumerate(layers):
        holds[call] = call  # the call's result tuple (``outputs``) is a local of its loop iteration
        reassigned = layers[k + directions] if k + directions < len(layers) else end
        for item in call.users:
            if item.args[1] == 0:
                holds[item] = reassigned
    def joins_directions(node: torch.fx.Node) -> bool:
        """``at::cat(layer_output, -1)``: the directions' outputs of one layer."""
        parts = node.args[0] if node.target is aten.cat.default else None
        return isinstance(parts, (list, tuple)) and all(
            isinstance(a, torch.fx.Node) and a.args[0] in layers for a in parts)

    cats = [n for n in made if joins_directions(n)]
    for k, cat in enumerate(cats):
        holds[cat] = cats[k + 1] if k + 1 < len(cats) else end
    return holds
