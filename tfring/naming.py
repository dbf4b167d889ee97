"""Names that pair tensors across ranks.

tfring pairs the tensors of different ranks by name. Where a name comes from:

- `name=` given: used as it is. Pass it when ranks may call collectives in different
  orders (threads, data-dependent branches).
- An unnamed op built into a graph (inside tf.function, or a TF1 graph) is named after the
  graph, as Horovod does: "Tfring<Op>_<input tensor's name>" (grouped ops: first and last), made unique within that graph
  the way TensorFlow makes op names unique, under the current name scope (unless
  `ignore_name_scope=True`). The name depends on the graph being built, never on what the
  process did before: a rank that retraced a function (a shorter last batch) or built
  another graph first still agrees with the others on every later op.
- An unnamed eager call is named by the runtime when it is queued: "unnamed.<n>", n
  counting the unnamed eager calls of its process set since init(). So ranks pair such
  calls in the order they make them, as Horovod does. A call that fails before it is queued
  (a bad argument on one rank) takes no number, so it shifts nothing. The op carries the
  caller's file and line instead of a name: its attributes stay the same from call to call
  (TensorFlow reuses its kernel), and when ranks' calls drift apart, the error says which
  call each rank made.
"""

import collections
import importlib.util
import os
import re
import sys

import tensorflow as tf

# What an op is given: `tensor_name` for its attribute ("" = named by the runtime),
# `cacheable` (whether the name recurs, so its negotiation can be cached), `call_site`,
# `op_name` (the TF node name to create it under in a graph; None eagerly) and `display`
# (what messages call it before it is queued).
OpNaming = collections.namedtuple("OpNaming",
                                  "tensor_name cacheable call_site op_name display")


def _package_dir(module_name):
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "")


# Frames in these packages are not the user's call site (tfring's wrappers, TensorFlow's
# gradient machinery and tf.function tracing, Keras's training loop).
_LIBRARY_DIRS = tuple(d for d in (_package_dir(m) for m in ("tfring", "tensorflow", "keras",
                                                             "tf_keras")) if d)


def call_site():
    """"file.py:LINE" of the nearest caller outside tfring, TensorFlow and Keras."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back
    if frame is None:
        return ""
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _normalize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _camel(kind):
    return "".join(part.capitalize() for part in kind.split("_"))


def op_naming(kind, name=None, inputs=(), ignore_name_scope=False):
    """How to name one op of collective `kind` ("allreduce", "grouped_allgather", ...)
    whose inputs are `inputs` (a tensor, or a list for grouped ops; in a graph their
    first and last tensors' names make the op's)."""
    if name is not None:
        return OpNaming(str(name), True, "", None, str(name))
    if tf.executing_eagerly():
        site = call_site()
        display = f"unnamed {kind} at {site}" if site else f"unnamed {kind}"
        return OpNaming("", False, site, None, display)
    base = f"Tfring{_camel(kind)}"
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if inputs:
        ends = inputs[:1] + inputs[-1:] if len(inputs) > 1 else inputs
        base += "_" + "_".join(_normalize(t.name) for t in ends)
    unique = tf.compat.v1.get_default_graph().unique_name(base, mark_as_used=False)
    if ignore_name_scope:
        unique = unique.rsplit("/", 1)[-1]
    return OpNaming(unique, True, "", base, unique)


def sub_name(name, suffix):
    """The name of one part of a composite operation named `name` (None stays None, so each
    part is named as an unnamed op on its own)."""
    return None if name is None else f"{name}.{suffix}"
