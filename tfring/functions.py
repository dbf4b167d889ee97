"""Operations built from the collectives, Horovod's `horovod.tensorflow.functions`:
broadcast_variables, broadcast_ (in place), broadcast_object, broadcast_object_fn and
allgather_object.

The object functions work eagerly and in TF1 graphs (where they run their ops in `session`,
the default session, or a new one), as Horovod's do.
"""

import pickle

import numpy as np
import tensorflow as tf

from tfring._ops import naming
from tfring._process import runtime
from tfring._ops.data_movement import allgather, broadcast
from tfring._ops.op_support import check_root
from tfring._ops.process_sets import global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False,
                        name=None):
    """Assigns root_rank's values to `variables` on every rank.

    In eager mode the assignment happens now (returns None); in a graph it returns the
    grouped assign op. `inplace=True` is `broadcast_` (the same result here).
    """
    check_root(root_rank, process_set)
    assigns = [v.assign(broadcast(v, root_rank, name=naming.sub_name(name, i),
                                  process_set=process_set))
               for i, v in enumerate(variables)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def _is_variable(v):
    # tf.Variable (resource or TF1 reference variables) and Keras 3 variables, which are
    # not tf.Variable subclasses but can be assigned and read.
    return isinstance(v, tf.Variable) or (hasattr(v, "assign") and hasattr(v, "dtype") and
                                          hasattr(v, "shape"))


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In place: every variable of `variables` takes root_rank's value.

    Works on resource variables, TF1 reference variables and Keras variables, eagerly, in
    tf.function and in TF1 graphs.

    Returns:
        The variables' new values, as Horovod's broadcast_: a list of tensors (one tensor
        when `variables` is a single variable). In a graph, evaluating them performs the
        broadcast and the assignments.
    """
    single = not isinstance(variables, (list, tuple))
    listed = [variables] if single else list(variables)
    for v in listed:
        if not _is_variable(v):
            raise TypeError(f"broadcast_ works in place on variables; got "
                            f"{type(v).__name__}. Use tfring.broadcast for tensors.")
    check_root(root_rank, process_set)
    values = []
    for i, v in enumerate(listed):
        received = broadcast(tf.convert_to_tensor(v), root_rank,
                             name=naming.sub_name(name, i), process_set=process_set)
        assign = v.assign(received)
        if tf.executing_eagerly():
            values.append(tf.convert_to_tensor(v))
        else:
            with tf.control_dependencies([assign]):
                values.append(tf.identity(received))
    return values[0] if single else values


def _evaluate(tensors, session):
    """The tensors' values: now in eager mode, else run in `session` (or the default
    session, or a new one)."""
    if tf.executing_eagerly():
        return [t.numpy() for t in tensors]
    session = session or tf.compat.v1.get_default_session()
    if session is not None:
        return session.run(tensors)
    with tf.compat.v1.Session() as own:
        return own.run(tensors)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's picklable `obj`, in rank order (of the set)."""
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = allgather(tf.constant([payload.size], dtype=tf.int64),
                      name=naming.sub_name(name, "sizes"), process_set=process_set)
    data = allgather(tf.constant(payload), name=naming.sub_name(name, "data"),
                     process_set=process_set)
    sizes, data = _evaluate([sizes, data], session)
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Returns root_rank's picklable `obj` on every rank (of the set)."""
    check_root(root_rank, process_set)
    is_root = runtime.rank() == root_rank
    payload = np.frombuffer(pickle.dumps(obj) if is_root else b"", dtype=np.uint8)
    size = broadcast(tf.constant([payload.size], dtype=tf.int64), root_rank,
                     name=naming.sub_name(name, "size"), process_set=process_set)
    size = int(_evaluate([size], session)[0][0])
    if not is_root:
        payload = np.zeros(size, dtype=np.uint8)
    data = broadcast(tf.constant(payload), root_rank, name=naming.sub_name(name, "data"),
                     process_set=process_set)
    return pickle.loads(_evaluate([data], session)[0].tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from root_rank (Horovod's helper for
    broadcasting many objects with the same settings)."""
    def _broadcast(obj):
        return broadcast_object(obj, root_rank, session=session, name=name,
                                process_set=process_set)
    return _broadcast


def broadcast_global_variables(root_rank):
    """An op that assigns root_rank's values to every global variable (TF1 graphs)."""
    if tf.executing_eagerly():
        raise RuntimeError("tfring.broadcast_global_variables is for TF1 graphs; in eager mode "
                           "use tfring.broadcast_variables(model.variables, root_rank).")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank,
                                           name="broadcast_global_variables")
