"""Ending an epoch together when ranks hold different numbers of batches (uneven data).

The first of tfring's callbacks to see a rank's epoch end calls `tfring.join()`: the rank
then takes part in the other ranks' remaining gradient allreduces with zeros. Once every
rank has joined, if ranks ran different numbers of steps, every rank takes the weights and
optimizer state of the rank that ran the most. A sharded optimizer's state
(shard_optimizer_state=True) is then gathered on rank 0, for a ModelCheckpoint listed
after tfring's callbacks to save it whole.
"""

import warnings
import weakref

import numpy as np
import tensorflow as tf

from tfring import collectives, functions
from tfring._process import runtime
from tfring._adapters import keras3
from tfring.keras import _callback_util as util
from tfring.keras import _tf_keras

# model -> {"start": optimizer iterations at the epoch's start, "joined": bool}; weak, so a
# model that goes takes its entry with it.
_epochs = weakref.WeakKeyDictionary()


def _iterations(model):
    optimizer = getattr(model, "optimizer", None)
    iterations = getattr(optimizer, "iterations", None)
    return 0 if iterations is None else int(util.as_float(iterations))


def end_epoch_together(model):
    """Joins, then, if ranks ran different numbers of steps this epoch, gives every rank the
    weights and optimizer state of the rank that ran the most. Once per epoch and model."""
    state = _epochs.get(model)
    if state is None or state["joined"]:
        return
    state["joined"] = True
    collectives.join()
    _take_the_longest_run(model, _iterations(model) - state["start"])
    gather_state = getattr(model.optimizer, "gather_state", None)
    if gather_state is not None:
        gather_state()


def _take_the_longest_run(model, steps):
    counts = collectives.allgather(tf.constant([steps], tf.int64),
                                   name="tfring.keras.epoch_steps").numpy()
    if len(set(counts.tolist())) == 1:
        return
    root = int(np.argmax(counts))
    if runtime.rank() == 0:
        warnings.warn(f"tfring: ranks ran {counts.tolist()} steps this epoch (uneven data); "
                      f"the ranks that ran out of data joined, and every rank continues from "
                      f"rank {root}'s weights and optimizer state.", stacklevel=2)
    functions.broadcast_variables(model.variables, root, name="tfring.keras.epoch_end.model")
    functions.broadcast_variables(optimizer_variables(model.optimizer), root,
                                  name="tfring.keras.epoch_end.optimizer")


class EndEpochTogether:
    """Mixin of the callbacks that end each epoch with `end_epoch_together`. A subclass
    that overrides on_epoch_begin or on_epoch_end calls super() first."""

    def on_epoch_begin(self, epoch, logs=None):
        _epochs[self.model] = {"start": _iterations(self.model), "joined": False}
        super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        end_epoch_together(self.model)
        super().on_epoch_end(epoch, logs)


def optimizer_variables(optimizer):
    """The optimizer's variables that every rank holds alike: all of them, but of a sharded
    one (shard_optimizer_state=True) not the blocks, which each rank holds its own of."""
    sharded = getattr(optimizer, "_sharded", None)
    if sharded is not None:
        # The Keras 3 wrapper's own variables too; a tf_keras optimizer is hooked in place.
        own = [] if _tf_keras.is_tf_keras_optimizer(optimizer) else keras3.own_variables(optimizer)
        return own + sharded.replicated_variables()
    return _tf_keras.all_variables(optimizer)
