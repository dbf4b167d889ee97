"""tfring.keras.elastic: Horovod's elastic Keras API (horovod.tensorflow.keras.elastic), for
Keras 3 and tf_keras, on tfring.elastic (MPI's fault tolerance: docs/elastic.md).

Horovod's pattern works with the import changed:

    import tfring.keras as hvd
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    state.register_reset_callbacks([lambda: model.optimizer.learning_rate.assign(lr * hvd.size())])
    callbacks = [hvd.elastic.CommitStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        model.fit(data, steps_per_epoch=..., epochs=epochs - state.epoch, callbacks=callbacks)

    train(state)

When a worker dies, `fit` raises on every survivor; `run` rolls the model, the optimizer and
`batch`/`epoch` back to the last commit, re-forms the job on the workers left, runs the
reset callbacks, syncs the state from the new rank 0 and calls `train` again, which goes on
from the committed epoch. Keras runs whole epochs: the epoch a reset interrupted starts
again from its first batch (the weights are those of the last commit within it).
"""

import tensorflow as tf

from tfring.elastic import (  # noqa: F401  (Horovod's names, importable from here too)
    HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, TensorFlowKerasState, run)
from tfring.keras import _callback_util as util

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run", "State", "ObjectState", "TensorFlowKerasState",
           "HorovodInternalError", "HostsUpdatedInterrupt"]


class KerasState(TensorFlowKerasState):
    """A Keras model, its optimizer (the model's when None), and keyword values such as
    `batch=0, epoch=0`, kept as attributes, committed, restored and synced together."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.keras.backend, **kwargs)


class CommitStateCallback(util.Callback):
    """Commits `state` after every `batches_per_commit` batches and at every epoch's end.

    Each commit copies the model and optimizer into host memory: a reset loses at most
    `batches_per_commit` batches, and fewer commits cost less time. The epoch's commit is
    made once every callback has seen the epoch end (at the next epoch's start, or the end
    of training), so that it holds the epoch count UpdateEpochStateCallback has just
    advanced, wherever the callbacks stand in the list. (Horovod's commits first, and a
    worker lost before the next commit then trains that epoch again.)"""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError(f"batches_per_commit must be 1 or more, not {batches_per_commit}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit
        self._epoch_ended = False

    def on_train_begin(self, logs=None):
        # Every worker counts from here after a reset, so that all commit at the same batch.
        self.batches_remaining = self.batches_per_commit
        self._epoch_ended = False

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self._epoch_ended = True

    def on_epoch_begin(self, epoch, logs=None):
        self._commit_ended_epoch()

    def on_train_end(self, logs=None):
        self._commit_ended_epoch()

    def _commit_ended_epoch(self):
        if self._epoch_ended:
            self._epoch_ended = False
            self.state.commit()


class UpdateBatchStateCallback(util.Callback):
    """Keeps `state.batch` at the index of the last batch done in the current epoch (0 once
    the epoch has ended), so that a commit records how far the epoch had come.

    Keras runs whole epochs: after a reset the interrupted epoch runs all its batches again,
    from the committed weights (Horovod shortened only the progress bar's count; Keras 3's
    loop does not read it, so tfring leaves it as it is)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(util.Callback):
    """Keeps `state.epoch` at the number of epochs done across resets: Keras numbers the
    epochs of each `fit` call from 0, and `train` calls `fit` again after a reset."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        # +1: an epoch that has ended is not run again after a reset.
        self.state.epoch = self.initial_epoch + epoch + 1
