"""Names that match tensors across ranks.

tfring pairs the tensors of different ranks by name, never by submission order. A name the
user passes is used as it is. Otherwise the name is "<collective>.<n>", where n counts the
calls of that collective made so far by this process: identical on every rank that makes the
same calls in the same program order, in eager mode and in tf.function/graph building alike.

Auto-named ops built into a graph (tf.function, TF1) run many times under one name, so
their negotiation is cached; an eager call without a name gets a fresh name every call and
is never cached. Pass name= when ranks may call collectives in different orders (threads,
data-dependent branches), and for eager ops in a loop (the name lets the cache work).
"""

import collections
import threading

import tensorflow as tf

_lock = threading.Lock()
_counters = collections.defaultdict(int)


def tensor_name(kind, name=None):
    """Returns (name, cacheable) for one op of collective `kind` ("allreduce", ...)."""
    if name is not None:
        return str(name), True
    with _lock:
        n = _counters[kind]
        _counters[kind] += 1
    return f"{kind}.{n}", not tf.executing_eagerly()
