"""Averaging gradients over ranks: the part shared by every optimizer wrapper and the tape.

Each gradient is matched across ranks by a name made from the wrapper kind, a digest of the
whole variable list, its position in the list and its variable's name, so the list must be
the same on every rank (the same model), but the order in which TF runs the allreduces does
not matter. No per-process counter enters the name: a rank that built an extra model or
optimizer (say, rank 0 alone saving a checkpoint) still names its gradients like the others.
For the same reason the numbers Keras appends to layer names per process ("dense_12") are
dropped: "sequential_3/dense_12/kernel" is matched as "sequential/dense/kernel" at its
position.
"""

import re
import zlib

import tensorflow as tf

from tfring import collectives
from tfring._ops import xla as _xla
from tfring.compression import Compression
from tfring._ops.process_sets import global_process_set

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/]")
_AUTO_NUMBER = re.compile(r"_\d+(?=/|$)")


def check_options(op, gradient_predivide_factor, backward_passes_per_step,
                  average_aggregated_gradients=False):
    """Validates the options every wrapper shares; raises ValueError naming the bad one."""
    if op not in (collectives.Average, collectives.Sum, collectives.Adasum):
        raise ValueError("op must be tfring.Average, tfring.Sum or tfring.Adasum for gradients. "
                         f"Received: {op!r}")
    if op == collectives.Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients=True (Horovod "
                         "neither): Adasum's result is not a sum to divide.")
    if gradient_predivide_factor != 1.0 and op != collectives.Average:
        raise ValueError("gradient_predivide_factor needs op=tfring.Average. "
                         f"Received: op={op!r}, gradient_predivide_factor="
                         f"{gradient_predivide_factor}")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1. "
                         f"Received: {backward_passes_per_step}")


def variable_label(variable, index):
    """A name for gradient `index` that is the same on every rank running the same model."""
    name = getattr(variable, "path", None) or getattr(variable, "name", None) or "grad"
    name = _AUTO_NUMBER.sub("", str(name).replace(":0", ""))
    return f"{index}.{_UNSAFE.sub('_', name)}"


def gradient_names(kind, variables):
    """The names that pair each variable's gradient across ranks (see the module doc)."""
    labels = [variable_label(v, i) for i, v in enumerate(variables)]
    digest = zlib.crc32("|".join(labels).encode())
    return [f"{kind}.{digest:08x}.{label}" for label in labels]


def _scale_factors(op, gradient_predivide_factor, set_size):
    """(wire op, prescale, postscale): Horovod's split of the average around the sum."""
    if op == collectives.Average and gradient_predivide_factor != 1.0:
        return (collectives.Sum, 1.0 / gradient_predivide_factor,
                gradient_predivide_factor / set_size)
    return op, 1.0, 1.0


def resolve_groups(num_groups, groups):
    """Horovod's deprecated `num_groups` (an int) stands for `groups` when that is None."""
    if num_groups and groups is None:
        return int(num_groups)
    return groups


class LocalVariables:
    """Variables whose gradients stay local (Horovod's register_local_var/_source, and the
    local_layers of the Partial wrappers): not reduced, and divided by the process set's size
    when scale_local_gradients is on, as Horovod does."""

    def __init__(self):
        self._by_id = {}  # id -> variable (held, so that the id stays its own)

    def add(self, variable):
        self._by_id[id(variable)] = variable

    def __contains__(self, variable):
        return self._by_id.get(id(variable)) is variable

    def __len__(self):
        return len(self._by_id)


def scaled_local(grad, set_size):
    if grad is None or set_size == 1:
        return grad
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / set_size, grad.indices, grad.dense_shape)
    return grad / tf.cast(set_size, grad.dtype)


def _group_indices(groups, variables, count):
    """Lists of gradient indices to reduce together (grouped_allreduce), then the rest alone."""
    if groups is None:
        return [], list(range(count))
    if isinstance(groups, int):
        if groups < 1:
            raise ValueError(f"groups must be >= 1 or a list of variable lists. Received: {groups}")
        bounds = [round(i * count / groups) for i in range(groups + 1)]
        return [list(range(bounds[i], bounds[i + 1])) for i in range(groups)
                if bounds[i] < bounds[i + 1]], []
    position = {id(v): i for i, v in enumerate(variables)}
    grouped, taken = [], set()
    for group in groups:
        indices = []
        for v in group:
            if id(v) not in position:
                raise ValueError(f"groups names a variable that has no gradient here: "
                                 f"{getattr(v, 'name', v)}")
            indices.append(position[id(v)])
        taken.update(indices)
        grouped.append(sorted(indices))
    return grouped, [i for i in range(count) if i not in taken]


def allreduce_gradients(grads, variables, *, op=collectives.Average,
                        compression=Compression.none, sparse_as_dense=False,
                        gradient_predivide_factor=1.0, groups=None, kind="grad",
                        process_set=global_process_set, local_variables=None,
                        scale_local_gradients=True):
    """Returns `grads` reduced over the ranks of `process_set` (None stays None).

    `kind` names the caller ("DistributedOptimizer", ...) in the tensor names.

    Dense gradients are allreduced (grouped as `groups` says); tf.IndexedSlices are
    allgathered, or densified first with sparse_as_dense=True. Gradients of
    `local_variables` (a LocalVariables) are not reduced (see LocalVariables).
    """
    grads, variables = list(grads), list(variables)
    set_size = process_set.size()
    if local_variables:
        local = {i for i, v in enumerate(variables) if v in local_variables}
        shared = [i for i in range(len(grads)) if i not in local]
        if isinstance(groups, list):
            groups = [[v for v in g if v not in local_variables] for g in groups]
        reduced = allreduce_gradients(
            [grads[i] for i in shared], [variables[i] for i in shared], op=op,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, groups=groups, kind=kind,
            process_set=process_set)
        out = [scaled_local(g, set_size) if scale_local_gradients else g for g in grads]
        for i, r in zip(shared, reduced):
            out[i] = r
        return out
    if set_size == 1 or (process_set is not global_process_set and not process_set.included()):
        # As Horovod: a rank outside the set keeps its own gradients.
        return grads
    wire_op, prescale, postscale = _scale_factors(op, gradient_predivide_factor, set_size)
    names = gradient_names(kind, variables)
    if _xla.in_xla_context():
        # Under XLA each op is one call that runs alone, and allgather has no lowering
        # (tfring/_ops/xla.py): one group gives the runtime the step's gradients at once, to fuse
        # as it fuses separate ops eagerly, and sparse gradients are reduced as dense ones.
        sparse_as_dense = True
        groups = 1 if groups is None else groups
    if sparse_as_dense:
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g in grads]
    if op == collectives.Adasum and groups is None:
        # Adasum's exchanges carry whole tensors pairwise: one group makes one exchange per
        # tree level for the whole model (each gradient keeps its own coefficients).
        groups = 1
    out = list(grads)
    present = [i for i, g in enumerate(grads) if g is not None]
    dense = [i for i in present if not isinstance(grads[i], tf.IndexedSlices)]
    for i in present:
        if isinstance(grads[i], tf.IndexedSlices):
            g = grads[i]
            values = g.values * prescale if prescale != 1.0 else g.values
            reduced = collectives.allreduce(
                tf.IndexedSlices(values, g.indices, g.dense_shape),
                op=op if prescale == 1.0 else collectives.Sum,
                name=names[i], process_set=process_set)
            if prescale != 1.0:
                reduced = tf.IndexedSlices(reduced.values * postscale, reduced.indices,
                                           reduced.dense_shape)
            out[i] = reduced
    grouped, alone = _group_indices(groups, [variables[i] for i in dense], len(dense))
    for k, group in enumerate(grouped):
        members = [dense[j] for j in group]
        sent, ctxs = zip(*(compression.compress(grads[i]) for i in members))
        reduced = collectives.grouped_allreduce(
            list(sent), op=wire_op, prescale_factor=prescale, postscale_factor=postscale,
            name=f"{names[members[0]]}.group{k}", process_set=process_set)
        for i, r, c in zip(members, reduced, ctxs):
            out[i] = compression.decompress(r, c)
    for j in alone:
        i = dense[j]
        sent, ctx = compression.compress(grads[i])
        reduced = collectives.allreduce(
            sent, op=wire_op, prescale_factor=prescale, postscale_factor=postscale,
            name=names[i], process_set=process_set)
        out[i] = compression.decompress(reduced, ctx)
    return out
