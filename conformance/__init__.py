"""torch-conformance: memory-lifetime and numerical-parity conformance for PyTorch compiler backends.

The package is cut in layers; each imports only the layers below it, and no two modules import
each other (``import-linter`` contracts in ``pyproject.toml``, run by ``tox -e lint`` and CI):

========================  =====================================================================
``conformance.cli``       the ``conformance`` command: subcommands, launch
``conformance.run``       a run: options, pytest plugin and runner, isolation, engine, repros
``conformance.checks``    the contracts: parity, memory judge, blame, timelines, baseline, manifests
``conformance.output``    what a run leaves: records, output directory, history, report, merge
``conformance.backends``  the built-in backend adapters (siblings, independent of each other)
``conformance.cases``     the built-in case families
``conformance.api``       the public API: adapter, case, verdict, result, step, AOT and pool helpers
``conformance.probes``    what a step really allocated: CPU observer and profiler, IREE HAL, CUDA
``conformance.models``    what it should allocate: lifetime model, program model, reference executor
``conformance.util``      text and phase clocks, importing nothing of the harness
========================  =====================================================================

``conformance.adapter``, ``conformance.case`` and ``conformance.verdict`` are the stable paths
vendors import; they re-export :mod:`conformance.api`.  The paths older guides showed
(``conformance.step``, ``conformance.aot``, ...) are served for a release by :mod:`conformance.compat`.
Nothing here imports torch.
"""

from conformance import compat as _compat

_compat.install()
