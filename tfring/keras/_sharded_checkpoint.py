"""Checkpoints of sharded optimizer state (shard_optimizer_state=True): written whole, in
the layout the same optimizer has unsharded, so that a checkpoint resumes at any number of
ranks, sharded or not.

The unsharded layout is learned, not assumed: a copy of the wrapped optimizer is built on
stand-ins for the model's variables (one element each), and the order in which it makes its
variables, and which model variable each slot belongs to, is recorded
(`add_variable_from_reference`). The wrapped optimizer, built on the blocks, is recorded the
same way: each of its slots is a block of one group's buffer.

Saving needs every rank's blocks, and Keras saves on rank 0 only (ModelCheckpoint there,
as Horovod's examples do). So every rank first sends its blocks to rank 0 (`gather`, a
collective: tfring's callbacks run it at each epoch's end, before a ModelCheckpoint listed
after them), and rank 0's save writes that snapshot, refusing one that is older than the
optimizer's step. Loading gives each rank its own block of the whole state, and keeps the
whole state until tfring's BroadcastGlobalVariablesCallback has sent root's to every rank
(`scatter_loaded`: rank 0 alone may have loaded the checkpoint).
"""

import contextlib

import numpy as np
import tensorflow as tf

from tfring import functions
from tfring._ops import data_movement
from tfring._process import runtime
from tfring._adapters import tf_keras as tf_keras_hooks
from tfring.keras import _sharded_tf_checkpoint, _tf_keras


def build_optimizer(optimizer, variables):
    """Makes the optimizer's variables for `variables`: build() (Keras 3, tf_keras), or
    the legacy build (tf_keras.optimizers.legacy)."""
    if tf_keras_hooks.is_legacy(optimizer) and not hasattr(optimizer, "build"):
        tf_keras_hooks.legacy_build(optimizer)(variables)
    else:
        optimizer.build(variables)


@contextlib.contextmanager
def recording_slots(optimizer, record):
    """While active, record.append((variable, reference, name)) for every slot that
    `optimizer` makes from a reference variable."""
    # Keras 3: add_variable_from_reference(reference_variable, name=None, ...); tf_keras:
    # (model_variable, variable_name, shape=None, initial_value=None), often by keyword;
    # tf_keras's legacy optimizers: add_slot(var, slot_name, initializer, shape), which
    # hands back the slot it made before when asked again.
    method = ("add_variable_from_reference" if hasattr(optimizer, "add_variable_from_reference")
              else "add_slot")
    make = getattr(optimizer, method)
    seen = set()

    def recorded(*args, **kwargs):
        variable = make(*args, **kwargs)
        reference = args[0] if args else kwargs.get(
            "reference_variable", kwargs.get("model_variable", kwargs.get("var")))
        name = args[1] if len(args) > 1 else kwargs.get(
            "name", kwargs.get("variable_name", kwargs.get("slot_name")))
        if id(variable) not in seen:
            seen.add(id(variable))
            record.append((variable, reference, name))
        return variable

    object.__setattr__(optimizer, method, recorded)
    try:
        yield
    finally:
        object.__delattr__(optimizer, method)  # the class's method again


class ShardedCheckpoint:
    """The whole state of one sharded optimizer: gathered for saving, and loaded into
    blocks."""

    def __init__(self, inner, update, blocks, block_slots, kind, new_variable):
        self._inner, self._update, self._kind = inner, update, kind
        self._new_variable = new_variable
        group_of_block = {id(b): g for g, b in enumerate(blocks)}
        # (variable, group, slot name) of the wrapped optimizer's slots, in its order.
        self._slots = [(v, group_of_block[id(ref)], name) for v, ref, name in block_slots]
        slot_ids = {id(v) for v, _, _ in self._slots}
        self._own = [v for v in _tf_keras.all_variables(inner) if id(v) not in slot_ids]
        self._layout = self._unsharded_layout()
        # (id of a model variable, slot name) -> its index among the unsharded variables.
        self._slot_index = {(id(self._update.variables[entry[0]]), entry[1]): k
                            for k, entry in enumerate(self._layout) if entry is not None}
        self._snapshot = None  # rank 0: {(group, name): whole buffer}, the step it is of
        self._saving = None  # (snapshot, values_to_save()) of the save under way
        self._loaded = None  # a loaded whole state, until scattered
        self._restoring = None  # tf.train.Checkpoint's restore: (whole buffers, indices)
        self._children = None  # tf.train.Checkpoint's view (made on first use)
        self._gathered = {}  # k -> its GatheredSlot
        self._mirror = None

    def replicated_variables(self):
        """The wrapped optimizer's variables that are the same on every rank (its step
        counter, its learning rate): those a broadcast may send as they are."""
        return list(self._own)

    def _unsharded_layout(self):
        """[(model variable index, slot name) or None (the optimizer's own)] in the order of
        the unsharded optimizer's variables."""
        template = type(self._inner).from_config(self._inner.get_config())
        stand_ins = [self._new_variable(tf.zeros([1] * len(v.shape), v.dtype),
                                        f"tfring_stand_in{j}")
                     for j, v in enumerate(self._update.variables)]
        index_of = {id(s): j for j, s in enumerate(stand_ins)}
        record = []
        with recording_slots(template, record):
            build_optimizer(template, stand_ins)
        slot_of = {id(v): (index_of[id(ref)], name) for v, ref, name in record}
        layout = [slot_of.get(id(v)) for v in _tf_keras.all_variables(template)]
        self._template, self._stand_ins = template, stand_ins
        if sum(entry is None for entry in layout) != len(self._own):
            raise ValueError(f"{self._kind}: {type(self._inner).__name__} makes other "
                             "variables unsharded than sharded; shard_optimizer_state=True "
                             "cannot checkpoint it.")
        return layout

    def saved_count(self):
        return len(self._layout)

    def dtype_of(self, k):
        """The dtype of the k-th variable of the unsharded optimizer."""
        return tf.as_dtype(_tf_keras.all_variables(self._template)[k].dtype)

    def _where(self, j):
        """(group, first element in the group's buffer, size, shape) of model variable j."""
        for g, (layout, members) in enumerate(zip(self._update.layouts,
                                                  self._update.members)):
            if j in members:
                k = members.index(j)
                return g, layout.offsets[k], layout.sizes[k], layout.shapes[k]
        raise AssertionError(j)

    def gather(self):
        """Collective: every rank sends its blocks of the state to rank 0, which keeps the
        whole of it (a snapshot of this step) for a save."""
        size, rank = runtime.size(), runtime.rank()
        snapshot = {}
        for variable, g, name in self._slots:
            block = tf.convert_to_tensor(variable)
            splits = [int(block.shape[0]) if r == 0 else 0 for r in range(size)]
            whole, _ = data_movement.alltoall(
                block, splits=splits, name=f"{self._update._name}.state.{g}.{name}")
            if rank == 0:
                snapshot[(g, name)] = whole.numpy()
        self._snapshot = (snapshot, int(self._inner.iterations.numpy())) if rank == 0 else None

    def values_to_save(self):
        """The wrapped optimizer's variables as the unsharded optimizer holds them, in its
        order (numpy arrays), from rank 0's snapshot."""
        if self._snapshot is None:
            raise RuntimeError(
                f"{self._kind}: the optimizer state is sharded and was not gathered on this "
                f"rank (rank {runtime.rank()}): save on rank 0, after tfring's callbacks "
                "gathered it at an epoch's end (list them before ModelCheckpoint), or call "
                "model.optimizer.gather_state() on every rank first.")
        snapshot, step = self._snapshot
        now = int(self._inner.iterations.numpy())
        if step != now:
            raise RuntimeError(
                f"{self._kind}: the gathered optimizer state is of step {step}, the optimizer "
                f"is at step {now}: gather it again on every rank right before saving "
                "(model.optimizer.gather_state(); tfring's callbacks do it at each epoch's "
                "end, so save there, save_freq='epoch').")
        own = iter(self._own)
        out = []
        for entry in self._layout:
            if entry is None:
                out.append(next(own).numpy())
                continue
            j, name = entry
            g, first, n, shape = self._where(j)
            out.append(snapshot[(g, name)][first:first + n].reshape(shape))
        return out

    def names_to_save(self):
        """The names of values_to_save() (tf_keras's HDF5 files list them): the unsharded
        optimizer's, "<optimizer>/<slot>/<model variable>:0" for a slot."""
        out = []
        for variable, entry in zip(_tf_keras.all_variables(self._template), self._layout):
            if entry is None:
                out.append(variable.name)
                continue
            j = entry[0]
            out.append(variable.name.replace(self._stand_ins[j].name.split(":")[0],
                                             self._update.variables[j].name.split(":")[0]))
        return out

    def value_to_save(self, k):
        """values_to_save()[k], computed once per save (tf.train.Checkpoint asks for each
        variable on its own)."""
        if self._saving is None or self._saving[0] is not self._snapshot:
            self._saving = (self._snapshot, self.values_to_save())
        return self._saving[1][k]

    def restore_one(self, k, value):
        """tf.train.Checkpoint restores one slot at a time: the blocks are assigned once it
        has restored every slot."""
        if self._restoring is None:
            self._restoring = ({}, set())
        whole, seen = self._restoring
        j, name = self._layout[k]
        g, first, n, _ = self._where(j)
        layout = self._update.layouts[g]
        buffer = whole.setdefault((g, name), np.zeros(layout.total,
                                                      layout.dtype.as_numpy_dtype))
        buffer[first:first + n] = np.ravel(value)
        seen.add(k)
        if len(seen) == sum(entry is not None for entry in self._layout):
            self._restoring = None
            self._loaded = whole
            self._assign_blocks(whole)

    def template_variables(self):
        """The unsharded optimizer's variables (the template's, on stand-ins)."""
        return _tf_keras.all_variables(self._template)

    def gathered_slot(self, k):
        """The checkpoint's object for the k-th unsharded variable, a slot (one per k: a
        checkpoint matches objects by identity)."""
        if k not in self._gathered:
            self._gathered[k] = _sharded_tf_checkpoint.GatheredSlot(self, k)
        return self._gathered[k]

    def slot_of(self, variable, name):
        """The checkpoint's object for slot `name` of model variable `variable`, or None
        when `variable` is not one of the model's (tf_keras's legacy optimizers keep slots
        by variable: a TensorFlow checkpoint asks for each model variable's)."""
        k = self._slot_index.get((id(variable), name))
        return None if k is None else self.gathered_slot(k)

    def trackable_children(self):
        """The wrapped optimizer's children as tf.train.Checkpoint sees it unsharded
        (_sharded_tf_checkpoint.py)."""
        if self._children is None:
            self._children = _sharded_tf_checkpoint.mirror_children(
                self._template, self._layout, self._own, self._stand_ins,
                self._update.variables, self, self._inner)
        return self._children

    def trackable_object(self):
        """An object whose checkpoint children are trackable_children() (one, kept: the
        checkpoint matches objects by identity)."""
        if self._mirror is None:
            self._mirror = _sharded_tf_checkpoint.mirror(self.trackable_children())
        return self._mirror

    def load(self, values):
        """Takes the unsharded optimizer's variables (in its order): this rank's blocks of
        them, and keeps them whole for `scatter_loaded`."""
        if len(values) != len(self._layout):
            raise ValueError(f"{self._kind}: the checkpoint holds {len(values)} optimizer "
                             f"variables, the optimizer makes {len(self._layout)}.")
        whole = {}
        own = iter(self._own)
        for entry, value in zip(self._layout, values):
            if entry is None:
                next(own).assign(value)
                continue
            j, name = entry
            g, first, n, _ = self._where(j)
            buffer = whole.setdefault((g, name), np.zeros(
                self._update.layouts[g].total, self._update.layouts[g].dtype.as_numpy_dtype))
            buffer[first:first + n] = np.ravel(value)
        self._loaded = whole
        self._assign_blocks(whole)

    def _assign_blocks(self, whole):
        for variable, g, name in self._slots:
            layout = self._update.layouts[g]
            variable.assign(whole[(g, name)][layout.start:layout.start + layout.length])

    def scatter_loaded(self, root_rank):
        """Collective: if `root_rank` loaded a checkpoint, every rank takes its blocks of
        root's whole state (the rest of the state is broadcast as it is)."""
        flag = functions.broadcast_object(self._loaded is not None, root_rank,
                                          name=f"{self._update._name}.loaded")
        if flag:
            whole = {}
            for _, g, name in self._slots:
                layout = self._update.layouts[g]
                mine = (self._loaded or {}).get((g, name))
                value = mine if mine is not None else np.zeros(
                    layout.total, layout.dtype.as_numpy_dtype)
                whole[(g, name)] = data_movement.broadcast(
                    tf.constant(value), root_rank,
                    name=f"{self._update._name}.loaded.{g}.{name}").numpy()
            self._assign_blocks(whole)
        self._loaded = None
