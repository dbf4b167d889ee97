"""tf.train.Checkpoint of sharded optimizer state (shard_optimizer_state=True): the object
graph a TensorFlow checkpoint sees is the one the same optimizer has unsharded, so that a
checkpoint written at N ranks restores at M ranks, sharded or not, and into a plain Keras
optimizer (without tfring).

TensorFlow checkpoints an object through its named children and, for a leaf, the tensors it
saves and restores (tfring/_adapters/tf_internals.py meets that protocol). The wrapped
optimizer, built on
blocks, has the wrong children (one slot per block, block-sized). Its unsharded template
(ShardedCheckpoint builds one on one-element stand-ins for the model's variables) has the
right names; the mirror here is that template's children with each template variable
replaced:
  - a slot (Adam's moment of model variable j, say) by a GatheredSlot, which writes the whole
    slot from rank 0's gathered snapshot and, restored, takes its part into this rank's
    blocks;
  - the optimizer's own variables (step counter, learning rate) by the real ones;
  - a stand-in by the model's variable.
"""

import tensorflow as tf

from tfring._adapters import tf_internals


class GatheredSlot(tf_internals.CheckpointLeaf):
    """One slot of one model variable, whole, in a checkpoint; this rank's blocks of it in
    memory."""

    def __init__(self, checkpoint, index):
        self._checkpoint = checkpoint
        self._index = index  # in the unsharded optimizer's variables

    def tensors_to_save(self):
        # The key a variable writes: a plain optimizer's variable restores from it, and this
        # from a plain optimizer's variable. A callable: TensorFlow also asks for this on a
        # restore, where only the dtype matters, and the value exists on rank 0 alone.
        # A py_function: TensorFlow traces the save into a function it may reuse, and the
        # value must be the one gathered for this save.
        dtype = self._checkpoint.dtype_of(self._index)

        def value():
            return tf.py_function(lambda: self._checkpoint.value_to_save(self._index), [],
                                  dtype)

        return {"VARIABLE_VALUE": tf_internals.save_spec(value, "", "", dtype=dtype,
                                                         device="/device:CPU:0")}

    def restore_tensors(self, restored_tensors):
        # TensorFlow restores inside a function too: the blocks are assigned when it runs.
        def restore(value):
            self._checkpoint.restore_one(self._index, value.numpy())
            return True

        return tf.py_function(restore, [restored_tensors["VARIABLE_VALUE"]], tf.bool)


def mirror_children(template, layout, own_variables, stand_ins, model_variables, checkpoint,
                    inner):
    """The template optimizer's checkpoint children, its variables replaced as the module
    says. `layout[k]` is None for the k-th template variable that is the optimizer's own.
    A child variable that is none of those (tf_keras keeps its learning rate out of
    `variables`) is `inner`'s child of the same name, and `inner`'s children that the
    template lacks are kept as they are."""
    replace = {}
    own = iter(own_variables)
    for k, (variable, entry) in enumerate(zip(checkpoint.template_variables(), layout)):
        replace[id(variable)] = next(own) if entry is None else checkpoint.gathered_slot(k)
    for stand_in, variable in zip(stand_ins, model_variables):
        replace[id(stand_in)] = variable

    def convert(child):
        if id(child) in replace:
            return replace[id(child)]
        if isinstance(child, (list, tuple)):
            return tf_internals.wrap_trackable([convert(c) for c in child])
        if isinstance(child, dict) or hasattr(child, "items"):
            return tf_internals.wrap_trackable({k: convert(v) for k, v in child.items()})
        if not isinstance(child, tf_internals.Trackable):
            return child  # a plain value in a tracked dict (tf_keras's _index_dict): unsaved
        raise ValueError(f"shard_optimizer_state=True cannot checkpoint the optimizer's "
                         f"{type(child).__name__} with tf.train.Checkpoint")

    own_children = tf_internals.class_trackable_children(inner)  # not the mirror
    children = {}
    for name, child in tf_internals.trackable_children(template).items():
        if id(child) not in replace and isinstance(child, tf.Variable):
            children[name] = own_children[name]
        else:
            children[name] = convert(child)
    for name, child in own_children.items():  # tracked on it by another (tf_keras's
        children.setdefault(name, child)       # LossScaleOptimizer: its loss scale)
    return children


def mirror(children):
    """An object whose checkpoint children are given (the wrapped optimizer, unsharded)."""
    return tf_internals.GivenChildren(children)
