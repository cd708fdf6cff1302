"""Compile errors, read from the compiler's and importer's own text (never the harness's): each pattern is tested
on the real error lines in ``tests/test_mechanism.py``.
"""

from __future__ import annotations

import re

from conformance.checks.mechanisms.evidence import Evidence, Recogniser
from conformance.checks.mechanisms.registry import Mechanism, mechanism, register

#: the docs line its mechanisms share
_DOCS_1 = ("the importer's `with_effects` gap, a tensor list holding None, a dtype its table lacks (`KeyError: "
           'torch.complex128`)')

#: the docs line its mechanisms share
_DOCS_2 = ("an error whose text names the importer's gap (`auto_functionalized_v2`, `!torch.none`, `legalize "
           'operation torch.operator`, `torch.constant.float`, `while_loop_stack_output` / `prim.Loop`, `Autograd '
           'not implemented for while_loop`)')

#: the docs line its mechanisms share
_DOCS_3 = ("the op sweep's IREE compile errors: `legalize operation 'torch.constant.int'` / `bool`; turbine's "
           'FakeTensorMode re-trace refusing a real constant (`Please convert all Tensors to FakeTensors first`); a '
           '`linalg.generic` whose operand shapes disagree (an overhanging pooling window); a semi-affine indexing '
           'map IREE does not tile (max_unpool)')

#: the docs line its mechanisms share
_DOCS_4 = ("the op sweep's other IREE errors, each with a standalone repro in `docs/findings`: `undefined symbol: "
           "log10f` at link; `'tm_tensor.topk' op region block must end with a linalg_ext.yield` (kthvalue); a "
           "float64 result over a buffer of float32's length (`buffer view byte length N exceeds backing buffer byte"
           " length M`, or `semaphore already signaled` when the failed call's fence is signalled again); turbine's "
           '`expected 0 outputs, got 1` for a function that returns a view of its input')


def _error(pattern: str, why: str) -> Recogniser:
    compiled = re.compile(pattern)

    def recognise(ev: Evidence) -> str | None:
        return why if ev.error and compiled.search(ev.error) else None

    return recognise


#: an aten op the compiler could not legalize: one torch-mlir defines (``'torch.aten.X'``) or one it
#: does not, which the importer emits as an opaque ``torch.operator`` named ``torch.aten.X``
_ATEN_ILLEGAL = re.compile(r"failed to legalize operation '(?:torch\.aten\.([\w.]+)'|torch\.operator'"
                           r"[^\n]*?name = \"torch\.aten\.([\w.]+)\")")


def _unknown_dtype(ev: Evidence) -> str | None:
    m = re.search(r"KeyError: (torch\.(?:complex|float|int|uint|bfloat|bool)\w*)", ev.error) if ev.error else None
    return f"the importer's dtype table has no {m[1]}" if m else None


register(Mechanism(
    'dtype-import',
    "a dtype the importer's table lacks (complex128)",
    _unknown_dtype,
    200,
    _DOCS_1,
))


#: a lowering's assertion, with the target inductor prints after it and the window arguments (kernel, stride,
#: padding) of an avg_pool2d backward
_POOL_BACKWARD = re.compile(r"LoweringException: AssertionError:.*?target: aten\.avg_pool2d_backward\.default", re.S)


_WINDOW_ARG = re.compile(r"args\[([234])\]: \[([^\]\n]*)\]")


@mechanism(
    'aten-op-no-lowering',
    170,
    "an aten op the graph holds has no lowering in the compiler (it does not "
        "legalize, or reaches it as an opaque torch.operator)",
    ("a compile error that an aten op did not legalize: `failed to legalize operation 'torch.aten.X'`, or an opaque "
     '`torch.operator` named `torch.aten.X` (asked before the custom-op and `!torch.none` ones, whose text it can '
     'hold)'),
)
def aten_op_no_lowering(ev: Evidence) -> str | None:
    """An aten op (not a custom one) that reaches the compiler and has no lowering there: the graph
    imported, the op did not legalize."""
    m = _ATEN_ILLEGAL.search(ev.error) if ev.error else None
    return f"no lowering for aten.{m[1] or m[2]}" if m else None


register(Mechanism(
    'effects-op-import',
    "an op with side effects (linalg's error checks) reaches the importer "
        "wrapped in the with_effects higher-order op, which it does not implement",
    _error(r"Higher-order operation 'with_effects' not implemented",
        "the importer does not implement with_effects"),
    180,
    _DOCS_1,
))

register(Mechanism(
    'none-in-list-import',
    "an optional-tensor list holding None (a backward's unused input grads) "
        "reaches the importer, which takes lists of one type only",
    _error(r"Heterogeneous lists are not supported: expected vtensor, got <class 'NoneType'>",
        "the importer rejects a tensor list holding None"),
    190,
    _DOCS_1,
))

register(Mechanism(
    'mutating-custom-op-import',
    "a mutating custom op reaches the importer as "
        "auto_functionalized_v2, which it does not implement",
    _error(r"auto_functionalized_v2", "the importer rejects auto_functionalized_v2"),
    210,
    _DOCS_2,
))

register(Mechanism(
    'none-result-import',
    "a None gradient reaches the importer as a result",
    _error(r"!torch\.none", "the importer rejects a '!torch.none' result"),
    220,
    _DOCS_2,
))

register(Mechanism(
    'dynamo-eager-fallback',
    "Dynamo ran the whole step in eager PyTorch: an op it cannot trace (a "
        "data-dependent value or shape, an in-place resize) left no graph for the backend to compile",
    _error(r"compiled no graph with \w+: Dynamo ran the case in eager",
        "Dynamo ran the step in eager: no graph reached the backend"),
    230,
    ('a compile failure saying Dynamo ran the whole step in eager PyTorch and no graph reached the backend '
     "(`compiled no graph with IREE: Dynamo ran the case in eager (<Dynamo's reason>)`)"),
))

register(Mechanism(
    'opaque-custom-op',
    "an op registered only through torch.library has no lowering",
    _error(r"legalize operation '?torch\.operator\b", "an opaque torch.operator could not be legalized"),
    240,
    _DOCS_2,
))

register(Mechanism(
    'float-constant-import',
    "a float scalar argument imported as torch.constant.float fails to "
        "legalize",
    _error(r"legalize operation '?torch\.constant\.float", "torch.constant.float not legalized"),
    250,
    _DOCS_2,
))

register(Mechanism(
    'scalar-constant-import',
    "an int or bool argument imported as torch.constant.int/bool stays "
        "unlegalized: the op that takes it (diag's offset, a 0-d reduction's dim, copysign's scalar) has no "
        "lowering for that form",
    _error(r"legalize operation '?torch\.constant\.(?:int|bool)'",
        "torch.constant.int/bool not legalized"),
    260,
    _DOCS_3,
))

register(Mechanism(
    'fake-retrace-constant',
    "turbine re-traces a graph that holds a real tensor constant (a backward's "
        "0-d zero) under FakeTensorMode, which refuses it",
    _error(r"Please convert all Tensors to FakeTensors first",
        "turbine's passes re-trace a real tensor constant under FakeTensorMode"),
    270,
    _DOCS_3,
))

register(Mechanism(
    'generic-shape-mismatch',
    "IREE's lowering of a pooling window that overhangs the input (ceil_mode, "
        "padding) builds a linalg.generic whose operand shapes disagree",
    _error(r"'linalg\.generic' op inferred input/output operand #\d+ has shape's dimension",
        "a linalg.generic with disagreeing operand shapes"),
    280,
    _DOCS_3,
))

register(Mechanism(
    'libm-symbol-link',
    "a dispatch lowered to a libm call the llvm-cpu target's embedded ELF does not "
        "define (log10 -> log10f), so the executable does not link",
    _error(r"undefined symbol: \w+", "a libm symbol the executable cannot link"),
    290,
    _DOCS_4,
))

register(Mechanism(
    'static-shape-refused',
    "torch-mlir's lowering emits a static shape op the verifier refuses: a "
        "tensor.cast between incompatible shapes where the op should broadcast or take a data-sized operand, or "
        "a tensor.expand_shape to a static dimension its operand does not have",
    _error(r"'tensor\.cast' op operand type 'tensor<[^']*>' and result type 'tensor<[^']*>' are cast "
        r"incompatible|'tensor\.expand_shape' op expected dimension \d+ of collapsed type to be static",
        "a static shape op the verifier refuses"),
    300,
    ("IREE's verifier refusing a static shape op torch-mlir emits: `'tensor.cast' op operand type ... and result "
     'type ... are cast incompatible` (a cast where the op should broadcast: fmax/fmin of a size-1 operand, '
     "masked_scatter; embedding_bag's empty offsets) or `'tensor.expand_shape' op expected dimension N of collapsed "
     'type to be static` (fftshift); another tensor.cast or expand_shape error is not this'),
))

register(Mechanism(
    'unbroadcast-operand',
    "torch-mlir's lowering of an elementwise op leaves a lower-rank operand "
        "unbroadcast: the linalg.generic it builds maps the operand at the result's rank (polar's angle)",
    _error(r"'linalg\.generic' op expected operand #\d+ rank \(\d+\) to match the result rank of "
        r"indexing_map \(\d+\)", "a lower-rank operand not broadcast to the result"),
    310,
    ("a compile error `'linalg.generic' op expected operand #N rank (a) to match the result rank of indexing_map "
     "(b)`: torch-mlir lowers an elementwise op with a lower-rank operand (polar's angle) to a generic that maps it "
     "at the result's rank, unbroadcast"),
))

register(Mechanism(
    'slice-out-of-bounds',
    "a crop (a constant pad's backward, a padded unpooling) lowered to a slice "
        "whose offsets are negative or whose extent runs past its tensor, which IREE refuses",
    _error(r"expected offsets to be non-negative, but got -\d+|slice along dimension \d+ runs "
        r"out-of-bounds: \d+ >= \d+", "a slice outside its tensor"),
    320,
    ('a compile error `expected offsets to be non-negative, but got -N` or `slice along dimension N runs '
     "out-of-bounds: a >= b`: a crop (a constant pad's backward, a padded max_unpool2d) lowered to a slice outside "
     'its tensor'),
))

register(Mechanism(
    'complex-scalar-import',
    "a graph holding a Python complex scalar (polar's backward: its `* 1j`), "
        "which turbine's importer does not take",
    _error(r"Unsupported argument type <class 'complex'>", "the importer refuses a complex scalar"),
    330,
    ("a compile error `Unsupported argument type <class 'complex'>`: a graph holding a Python complex scalar "
     "(polar's backward), which turbine's importer refuses"),
))

register(Mechanism(
    'topk-region-yield',
    "torch-mlir's tm_tensor.topk (kthvalue's lowering) has a comparator region the "
        "IREE verifier refuses",
    _error(r"'tm_tensor\.topk' op region block must end with a linalg_ext\.yield",
        "tm_tensor.topk's region refused"),
    340,
    _DOCS_4,
))

register(Mechanism(
    'float64-result-buffer',
    "a float64 result over a buffer of float32's byte length (the input pipeline "
        "demotes float64), failing the call or its fence",
    _error(r"buffer view byte length \d+ exceeds backing buffer byte length|semaphore already signaled",
        "a float64 result's buffer has float32's length"),
    350,
    _DOCS_4,
))

register(Mechanism(
    'returned-input-view',
    "turbine's call path asserts on the output count of a graph that returns only a "
        "view of its input, regenerated outside it",
    _error(r"AssertionError: expected \d+ outputs, got \d+",
        "a returned view of the input, no graph result"),
    360,
    _DOCS_4,
))

register(Mechanism(
    'semi-affine-tiling',
    "a linalg.generic with a semi-affine indexing map (max_unpool's scatter) that "
        "IREE's tiling does not support",
    _error(r"tiling is not supported for the semi-affine indexing map", "semi-affine map not tiled"),
    370,
    _DOCS_3,
))

register(Mechanism(
    'while-loop-import',
    "the importer's while_loop lowering (torch.prim.Loop, "
        "while_loop_stack_output) fails",
    _error(r"while_loop_stack_output|prim\.Loop|region branch point",
        "the importer's while_loop lowering failed"),
    400,
    _DOCS_2,
))

@mechanism(
    'pool-backward-short-list',
    430,
    "inductor's avg_pool2d backward lowering asserts two entries in a "
        "window argument eager gives one (padding=[1])",
    ("inductor's compile error `LoweringException: AssertionError` whose target is "
     '`aten.avg_pool2d_backward.default` and whose window arguments (`args[2..4]`: kernel, stride, padding) include '
     'a one-entry list, which eager and the forward lowering accept for both dimensions'),
)
def pool_backward_short_list(ev: Evidence) -> str | None:
    """Inductor's avg_pool2d backward lowering asserts two entries in each window argument, where eager (and
    the forward lowering, which pads the list) takes one for both dimensions: ``padding=[1]``."""
    m = _POOL_BACKWARD.search(ev.error) if ev.error else None
    if m is None:
        return None
    names = {"2": "kernel_size", "3": "stride", "4": "padding"}
    short = dict.fromkeys(f"{names[i]}=[{v.strip()}]" for i, v in _WINDOW_ARG.findall(ev.error[m.end():])
                          if len([x for x in v.split(",") if x.strip()]) == 1)  # the message is printed twice
    return f"avg_pool2d's backward lowering refuses a one-entry {', '.join(short)}" if short else None


register(Mechanism(
    'while-loop-no-autograd',
    "torch.while_loop has no autograd in this torch",
    _error(r"Autograd not implemented for while_loop", "while_loop has no autograd"),
    440,
    _DOCS_2,
))
