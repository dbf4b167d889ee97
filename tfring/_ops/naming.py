"""Names that pair tensors across ranks.

tfring pairs the tensors of different ranks by name. Where a name comes from:

- `name=` given: used as it is. Pass it when ranks may call collectives in different
  orders (threads, data-dependent branches).
- An unnamed op built into a graph (inside tf.function, or a TF1 graph) is named after the
  graph, as Horovod does: "<name scope>/Tfring<Op>_<input tensor's name>" (grouped ops:
  first and last input; no scope with `ignore_name_scope=True`), with ".<k>" added to the
  k-th further op of that name in the same graph. The numbers TensorFlow and Keras append
  per process ("sequential_3/dense_12/MatMul_1") are left out: they count what the process
  built before, so a rank that made one more layer or op has other numbers, and so are
  the numbers TF names captured eager tensors by ("3:0" becomes "captured:0"). Ops they
  told apart are told apart by k instead, in the order the graph is built. So the name depends
  on the graph being built, never on the process's history: a rank that retraced a function
  (a shorter last batch) or built another graph or model first still agrees with the others.
- An unnamed eager call is named by the runtime when it is queued: "unnamed.<n>", n
  counting the unnamed eager calls of its process set since init(). So ranks pair such
  calls in the order they make them, as Horovod does. A call that fails before it is queued
  (a bad argument on one rank) takes no number, so it shifts nothing. The op carries the
  caller's file and line instead of a name: its attributes stay the same from call to call
  (TensorFlow reuses its kernel), and when ranks' calls drift apart, the error says which
  call each rank made. The runtime caches such calls' negotiation by call site, so a
  training loop's unnamed calls cost what named ones do.
"""

import collections
import importlib.util
import os
import re
import sys
import weakref

import tensorflow as tf

# What an op is given: `tensor_name` for its attribute ("" = named by the runtime),
# `cacheable` (whether the name recurs, so its negotiation can be cached), `call_site`,
# `op_name` (the TF node name to create it under in a graph; None eagerly), `display` (what
# messages call it before it is queued) and `graph_key` (in a graph: what created() counts).
OpNaming = collections.namedtuple(
    "OpNaming", "tensor_name cacheable call_site op_name display graph_key")


def _package_dir(module_name):
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "")


# Frames in these packages are not the user's call site (tfring's wrappers, TensorFlow's
# gradient machinery and tf.function tracing, Keras's training loop).
_LIBRARY_DIRS = tuple(d for d in (_package_dir(m) for m in ("tfring", "tensorflow", "keras",
                                                             "tf_keras")) if d)


# "file.py:LINE" per (code object, instruction offset) already seen: a training loop's call
# comes from the same few places, and working out a frame's line number each time is a
# sizeable part of a small eager collective. Keyed by the code object's id, not the object
# (hashing a code object hashes its bytecode and constants, on every call); each entry
# keeps its code object alive, so no other code can take that id. Bounded, as a program
# that generates code could make places without end.
_SITES = {}
_SITES_MAX = 4096


def call_site(skip=1):
    """"file.py:LINE" of the nearest caller outside tfring, TensorFlow and Keras (the frames
    of call_site's caller and the `skip - 1` ones above it are known to be tfring's)."""
    return _site_from(sys._getframe(skip))


def _site_from(frame):
    """call_site from `frame` up."""
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back
    if frame is None:
        return ""
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    known = _SITES.get(key)
    if known is not None:
        return known[1]
    site = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"
    if len(_SITES) < _SITES_MAX:
        _SITES[key] = (code, site)
    return site


# "_12" suffixes of name components: TF's per-graph and Keras's per-process numbering.
_AUTO_NUMBERS = re.compile(r"(_\d+)+(?=/|:|$)")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


# A name component that is only a number: an eager tensor a function captured becomes a
# constant named by a counter of the process ("3:0"), which differs between ranks.
_NUMBER_NAMES = re.compile(r"(?:^|(?<=/))\d+(?=/|:|$)")


def _stable(name):
    return _NUMBER_NAMES.sub("captured", _AUTO_NUMBERS.sub("", name))


def _camel(kind):
    return "".join(part.capitalize() for part in kind.split("_"))


# Per graph: how many ops of each name it has (so the k-th gets ".<k>").
_GRAPH_COUNTS = weakref.WeakKeyDictionary()


# Unnamed eager calls' (call site, display) per (collective, the code object and
# instruction of the frame that called the public function): that frame is the user's line
# in almost every call, and then this one lookup replaces the walk up the stack, which would
# be most of what an unnamed eager call costs more than a named one. Keyed and kept alive as
# _SITES; a frame of tfring, TensorFlow or Keras is never a key, as the site then depends
# on the frames above it.
_EAGER_UNNAMED = {}


def eager_unnamed(kind, depth):
    """(call_site, display) of an unnamed eager call of collective `kind`, whose public
    function was called `depth` frames above eager_unnamed's caller."""
    frame = sys._getframe(depth + 1)
    code = frame.f_code
    key = (kind, id(code), frame.f_lasti)
    known = _EAGER_UNNAMED.get(key)
    if known is not None:
        return known[1]
    site = _site_from(frame)
    known = (site, f"unnamed {kind} at {site}" if site else f"unnamed {kind}")
    if not code.co_filename.startswith(_LIBRARY_DIRS) and len(_EAGER_UNNAMED) < _SITES_MAX:
        _EAGER_UNNAMED[key] = (code, known)
    return known


def op_naming(kind, name=None, inputs=(), ignore_name_scope=False):
    """How to name one op of collective `kind` ("allreduce", "grouped_allgather", ...)
    whose inputs are `inputs` (a tensor, or a list for grouped ops). In a graph, call
    created() once the op exists."""
    if name is not None:
        return OpNaming(str(name), True, "", None, str(name), None)
    if tf.executing_eagerly():
        site = call_site()
        display = f"unnamed {kind} at {site}" if site else f"unnamed {kind}"
        return OpNaming("", False, site, None, display, None)
    base = f"Tfring{_camel(kind)}"
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if inputs:
        ends = inputs[:1] + inputs[-1:] if len(inputs) > 1 else inputs
        base += "_" + "_".join(_UNSAFE.sub("_", _stable(t.name)) for t in ends)
    graph = tf.compat.v1.get_default_graph()
    scope = "" if ignore_name_scope else _stable(graph.get_name_scope())
    key = f"{scope}/{base}" if scope else base
    taken = _GRAPH_COUNTS.get(graph, {}).get(key, 0)
    unique = key if taken == 0 else f"{key}.{taken}"
    return OpNaming(unique, True, "", base, unique, (graph, key))


def created(naming):
    """Records that the op named by `naming` now exists in its graph: the next op of the
    same name there gets the next number. Not called for an op that failed its checks, so
    such a failure on one rank shifts no later name."""
    if naming.graph_key is None:
        return
    graph, key = naming.graph_key
    counts = _GRAPH_COUNTS.setdefault(graph, {})
    counts[key] = counts.get(key, 0) + 1


def part_display(display, index, count):
    """What messages call tensor `index` of an op of `count` tensors called `display`: a
    grouped op's tensors are parts, written as the runtime writes a part's key
    (tensor_key.cc, KeyString)."""
    return display if count == 1 else f"{display}.{index}"


def sub_name(name, suffix):
    """The name of one part of a composite operation named `name` (None stays None, so each
    part is named as an unnamed op on its own)."""
    return None if name is None else f"{name}.{suffix}"
