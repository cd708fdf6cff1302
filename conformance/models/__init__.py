"""What a step should allocate: the models the probes are held to.

``lifetime`` (the tensor-lifetime model of an ATen graph, one module per pass), ``program`` (the
model of the Python wrapper inductor generated), ``interpreter`` (the reference executor that runs
a graph op by op), ``donation`` (which backward inputs a backend may free), ``transients`` (what an
eager kernel allocates inside one op), ``optimizer`` (what an optimizer step allocates, appended to a
training step's model).

May import: ``conformance.util``.
"""
