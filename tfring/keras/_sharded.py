"""shard_optimizer_state=True for the Keras 3 wrappers: the wrapped optimizer keeps and
updates this rank's block of the weights only (tfring/_training/sharded_state.py says how).

The wrapped optimizer is built on block variables (one per group, of the block's size)
instead of the model's variables, so its slots are blocks too. Each step copies this rank's
block of the current weights into them (the weights may have changed outside the optimizer:
a broadcast, set_weights, a restored checkpoint), lets the optimizer update them with the
block's reduced gradient, and gathers every rank's block back into the model's variables.

What a whole-variable optimizer computes over all gradients is made whole again here: the
norms of clipnorm and global_clipnorm are summed over the ranks' blocks, and a
LossScaleOptimizer's finite test is one answer for all ranks (DistributedLossScaleOptimizer
asks `all_finite`). Weight decay stays per variable: variables with it and without it are
separate groups, and the block of the group without it is excluded from decay.
"""

import keras
import tensorflow as tf

from tfring import collectives
from tfring._training import sharded_state as _sharded_state
from tfring._process import runtime
from tfring._adapters import keras3
from tfring._adapters import tf_keras as tf_keras_hooks
from tfring.keras import _sharded_checkpoint, _tf_keras
from tfring._ops.process_sets import global_process_set


def check_options(op, process_set, groups):
    """Raises ValueError for what sharded state cannot do, saying why."""
    if op not in (collectives.Average, collectives.Sum):
        raise ValueError("shard_optimizer_state=True needs op=tfring.Average or tfring.Sum: "
                         "Adasum combines whole gradients pairwise, and a rank holds a "
                         f"block of them only. Received: op={op!r}")
    if process_set is not global_process_set:
        raise ValueError("shard_optimizer_state=True shards the state over all ranks; it "
                         "cannot reduce over a process set (the ranks outside it would hold "
                         "blocks no one updates).")
    if groups is not None:
        raise ValueError("shard_optimizer_state=True reduces each dtype's gradients as one "
                         "buffer already; `groups` has no meaning there. Leave it None.")


def dense(grads, variables, sparse_as_dense):
    """`grads` with tf.IndexedSlices made dense when sparse_as_dense is on; an error
    otherwise (a block holds parts of whole variables, not rows of some)."""
    out = []
    for g, v in zip(grads, variables):
        if isinstance(g, tf.IndexedSlices):
            if not sparse_as_dense:
                raise ValueError(
                    f"The gradient of '{v.name}' is sparse (tf.IndexedSlices, an Embedding's "
                    "say). shard_optimizer_state=True reduces dense blocks: pass "
                    "sparse_as_dense=True to make such gradients dense.")
            g = tf.convert_to_tensor(g)
        out.append(g)
    return out


def keras_variable(value, name):
    """A Keras 3 variable (what Keras 3 optimizers are built on)."""
    return keras.Variable(value, dtype=value.dtype, trainable=False, name=name)


def tf_variable(value, name):
    """A tf.Variable (what tf_keras optimizers are built on)."""
    return tf.Variable(value, trainable=False, name=name)


class ShardedKerasState:
    """The blocks of one Keras optimizer: the Keras 3 wrapper's inner optimizer, or a
    tf_keras optimizer hooked in place (an object Keras does not track: the block variables
    mirror the model's weights and are no optimizer state of their own).

    new_variable(value, name) makes a variable of the kind the optimizer is built on."""

    def __init__(self, inner, kind, compression, op, gradient_predivide_factor,
                 new_variable=keras_variable):
        _refuse_ema(inner, kind)  # known now: refused at construction, not at the first step
        _refuse_not_elementwise(inner, kind)
        self._inner = inner
        self._new_variable = new_variable
        self._kind = kind
        self._options = dict(compression=compression, op=op,
                             gradient_predivide_factor=gradient_predivide_factor)
        self.update = None
        self.blocks = []
        self._slots = []  # (slot, block, name) as the wrapped optimizer makes them
        self._checkpoint = None

    def build_inner(self, variables, build_fn):
        """Makes the blocks of `variables` (the model's) and calls build_fn(blocks), which
        builds the wrapped optimizer on them."""
        blocks = self._make_blocks(variables)
        with _sharded_checkpoint.recording_slots(self._inner, self._slots):
            build_fn(blocks)
        for slot, block, name in self._slots:
            if tuple(slot.shape) != tuple(block.shape):
                raise ValueError(
                    f"{self._kind}: {type(self._inner).__name__} keeps a '{name}' of shape "
                    f"{tuple(slot.shape)} for a block of {tuple(block.shape)}: "
                    "shard_optimizer_state=True needs an optimizer whose state is kept "
                    "element by element (SGD, Adam, AdamW, RMSprop, ...).")
        inner = self._inner
        # Keras saves the wrapped optimizer on its own too (model.save walks its
        # attributes): whole, as the wrapper saves it. (tf_keras's legacy optimizers have
        # no state in Keras files.)
        if hasattr(type(inner), "save_own_variables"):
            inner.save_own_variables = lambda store: _store(store,
                                                            self.checkpoint.values_to_save())
            inner.load_own_variables = lambda store: self.checkpoint.load(_stored(store))

    @property
    def checkpoint(self):
        """The whole state's layout, gathering and loading (made on first use)."""
        if self._checkpoint is None:
            self._checkpoint = _sharded_checkpoint.ShardedCheckpoint(
                self._inner, self.update, self.blocks, self._slots, self._kind,
                self._new_variable)
        return self._checkpoint

    def checkpoint_children(self, owner):
        """tf.train.Checkpoint's view of the optimizer: as it is unsharded
        (_sharded_tf_checkpoint.py). Refuses one not built yet, which has no blocks."""
        self._require_built(owner, "tf.train.Checkpoint saves or restores it")
        return self.checkpoint.trackable_children()

    def _require_built(self, owner, what):
        if self.update is None:
            raise ValueError(
                f"{owner}: with shard_optimizer_state=True, build the optimizer before "
                f"{what} (one training step, or optimizer.build(model.trainable_variables)): "
                "the blocks are laid out when it is built.")

    def _make_blocks(self, variables):
        inner = self._inner
        self._refuse(variables)
        decays = getattr(inner, "weight_decay", None) is not None
        self.update = _sharded_state.ShardedUpdate(
            variables, runtime.rank(), runtime.size(), self._kind,
            group_of=(lambda v: keras3.uses_weight_decay(inner, v)) if decays else
            (lambda v: None), **self._options)
        self.blocks = []
        for g, layout in enumerate(self.update.layouts):
            self.blocks.append(self._new_variable(tf.zeros([layout.length], layout.dtype),
                                                  f"tfring_block{g}"))
        if decays:
            keras3.exclude_from_weight_decay(inner, [
                b for b, (_, decay) in zip(self.blocks, self.update.group_keys) if not decay])
            for block, (_, decay) in zip(self.blocks, self.update.group_keys):
                if decay and not keras3.uses_weight_decay(inner, block):
                    raise ValueError(
                        f"{self._kind}: the optimizer's exclude_from_weight_decay names match "
                        f"tfring's block variable '{block.name}'; with shard_optimizer_state="
                        "True, exclude variables by var_list or by names that do not match "
                        "'tfring_block'.")
        self._clip_over_ranks()
        return self.blocks

    def values_to_save(self):
        """The wrapped optimizer's variables, whole, in the order it has unsharded."""
        return self.checkpoint.values_to_save()

    def load(self, values):
        """Takes the wrapped optimizer's variables as it has them unsharded."""
        self._require_built(self._kind, "setting its weights")
        self.checkpoint.load(values)

    def saved_count(self):
        """How many variables the wrapped optimizer has unsharded."""
        return self.checkpoint.saved_count()

    def _refuse(self, variables):
        _refuse_ema(self._inner, self._kind)  # set on the optimizer since, say
        for v in variables:
            if getattr(v, "overwrite_with_gradient", False):
                raise ValueError(f"{self._kind}: variable '{v.name}' is overwritten with its "
                                 "gradient (overwrite_with_gradient), which "
                                 "shard_optimizer_state=True cannot split into blocks.")

    def _clip_over_ranks(self):
        """The wrapped optimizer clips the blocks' gradients with norms of whole variables
        (clipnorm) or of the whole model (global_clipnorm), summed over the ranks."""
        inner, update = self._inner, self.update
        # numpy: build() may run inside one traced function and the clipping in another.
        segment_arrays = [layout.segment_ids() for layout in update.layouts]
        counts = [len(layout.variables) for layout in update.layouts]

        def clip_norms(grads):
            """The blocks' gradients clipped by norm, or None where no norm clips."""
            if inner.clipnorm and inner.clipnorm > 0:
                segments = [tf.constant(ids) for ids in segment_arrays]
                squares = [tf.math.unsorted_segment_sum(tf.square(g), ids, n)
                           for g, ids, n in zip(grads, segments, counts)]
                sums = tf.split(update.sum_over_ranks(
                    tf.concat([tf.cast(s, tf.float32) for s in squares], 0), "clipnorm"),
                    counts)
                out = []
                for g, ids, s in zip(grads, segments, sums):
                    norm = tf.sqrt(s)
                    factor = inner.clipnorm / tf.maximum(norm, inner.clipnorm)
                    out.append(g * tf.cast(tf.gather(factor, ids), g.dtype))
                return out
            if inner.global_clipnorm and inner.global_clipnorm > 0:
                square = tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float32)))
                                   for g in grads])
                norm = tf.sqrt(update.sum_over_ranks(square, "global_clipnorm"))
                clip = inner.global_clipnorm
                scale = clip * tf.minimum(1.0 / norm, 1.0 / clip) + (norm - norm)
                return [g * tf.cast(scale, g.dtype) for g in grads]
            return None

        if keras3.replace_gradient_clipping(inner, clip_norms):  # Keras 3, tf_keras
            return
        # tf_keras's legacy optimizers clip (gradient, variable) pairs.
        tf_keras_hooks.replace_legacy_clipping(inner, clip_norms)

    def step(self, grads, variables, apply_fn):
        """Reduces `grads` (one per model variable) into blocks, applies them with
        apply_fn(block_grads, block_variables), and gathers the blocks into `variables`."""
        if [id(v) for v in variables] != [id(v) for v in self.update.variables]:
            raise ValueError(f"{self._kind}: with shard_optimizer_state=True every step must "
                             "update the variables the optimizer was built on, in the same "
                             "order (their blocks are laid out for those).")
        if runtime.size() != self.update.size:
            raise ValueError(f"{self._kind}: the optimizer's blocks were laid out for "
                             f"{self.update.size} ranks and the job now has {runtime.size()}: "
                             "shard_optimizer_state=True does not follow elastic changes.")
        missing = [v.name for g, v in zip(grads, variables) if g is None]
        if missing:
            raise ValueError(f"{self._kind}: no gradient for {missing}. With "
                             "shard_optimizer_state=True every trainable variable needs a "
                             "gradient (its elements share blocks with other variables'); "
                             "freeze such variables (trainable=False) instead.")
        grads = [tf.convert_to_tensor(g) for g in grads]
        block_grads = self.update.reduce_scatter(grads)
        for block, value in zip(self.blocks, self.update.blocks_of(variables)):
            block.assign(value)
        apply_fn(block_grads, self.blocks)
        for v, value in zip(variables, self.update.allgather(self.blocks)):
            v.assign(value)
            if getattr(v, "constraint", None) is not None:
                v.assign(v.constraint(v))

    def replicated_variables(self):
        """The wrapped optimizer's variables that every rank holds alike (counters, the
        learning rate): what a broadcast of the optimizer may send as they are."""
        slots = {id(slot) for slot, _, _ in self._slots}
        return [v for v in _tf_keras.all_variables(self._inner) if id(v) not in slots]

    def all_finite(self, finite):
        """One answer for all ranks: whether every rank's block of the gradients is finite."""
        return self.update.min_over_ranks(tf.cast(finite, tf.int32), "finite") > 0


def _refuse_ema(inner, kind):
    if getattr(inner, "use_ema", False):
        raise ValueError(f"{kind}: shard_optimizer_state=True does not support use_ema=True "
                         "yet (the moving averages would be blocks, and "
                         "finalize_variable_values writes whole variables).")


# Optimizers whose update of an element needs more than that element's gradient and state:
# Adafactor factors its second moment over rows and columns; Lamb scales each update by the
# whole variable's norms. On a block they build per-element state the layout accepts and
# train differently from unsharded (measured: every weight off by about 1e-2 after a step).
_NOT_ELEMENTWISE = ("Adafactor", "Lamb")


def _refuse_not_elementwise(inner, kind):
    name = type(inner).__name__
    if any(c.__name__ in _NOT_ELEMENTWISE for c in type(inner).__mro__):
        raise ValueError(f"{kind}: shard_optimizer_state=True needs an optimizer whose state is "
                         f"kept element by element; {name} is not (its update of an element "
                         "depends on whole rows, columns or norms of the variable). Use it "
                         "without shard_optimizer_state.")


def _store(store, values):
    for i, value in enumerate(values):
        store[str(i)] = value


def _stored(store):
    return [store[str(i)] for i in range(len(store.keys()))]
