"""Keras callbacks for data-parallel training, with Horovod's names and arguments.

Keras 3 is the main target; under TF_USE_LEGACY_KERAS=1 the same callbacks derive from
tf_keras (the base classes are `tf.keras.callbacks.*`, resolved when this module is imported).

Callbacks run in the order of the list given to `fit()`, and each sees the `logs` the ones
before it left. The recommended order:

    callbacks = [
        # 1. Every rank starts from rank 0's weights and optimizer state.
        tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0),
        # 2. Epoch metrics averaged over ranks, before anything reads them.
        tfring.keras.callbacks.MetricAverageCallback(),
        # 3. Learning rate changes (warmup, then a schedule).
        tfring.keras.callbacks.LearningRateWarmupCallback(initial_lr=0.1 * size,
                                                           warmup_epochs=5),
        tfring.keras.callbacks.LearningRateScheduleCallback(0.1 * size, 0.1,
                                                             start_epoch=30),
    ]
    # 4. Then what writes files or reads the averaged metrics, on rank 0 only.
    if tfring.keras.rank() == 0:
        callbacks.append(keras.callbacks.TensorBoard("logs"))
    # Give it to every rank: it writes on rank 0 only.
    callbacks.append(tfring.keras.callbacks.BestModelCheckpoint("best.keras"))

Keras adds its History and progress bar after the callbacks it is given, so both see the
averaged metrics.

Uneven data: when ranks hold different numbers of batches, a rank that runs out ends its
epoch first. The first of BroadcastGlobalVariablesCallback, MetricAverageCallback and the
learning-rate callbacks to see the epoch end calls `tfring.join()`: the rank then takes part
in the other ranks' remaining gradient allreduces with zeros, and their Average divides by
the ranks that still have data, so those batches count in full. Once every rank has joined,
if ranks ran different numbers of steps, every rank takes the weights and optimizer state of
the rank that ran the most (the others stopped stepping early); then the epoch ends as
usual. List these callbacks before any that reads the weights at the end of an epoch.

Every callback turns off XLA (`jit_compile`) for the model it is attached to: tfring's
collectives have no XLA lowering.
"""

import contextlib
import numbers

import numpy as np
import tensorflow as tf

from tfring import functions
from tfring._training import gradients
from tfring._process import runtime
from tfring._process.straggler_report import straggler_report
from tfring._adapters import tf_keras as tf_keras_hooks
from tfring.keras import _callback_util as util
from tfring.keras import _epoch_end, _values
from tfring.keras._lr_callbacks import LearningRateScheduleCallback, LearningRateWarmupCallback

__all__ = [
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateWarmupCallback",
    "LearningRateScheduleCallback", "BestModelCheckpoint",
]


# BroadcastGlobalVariablesCallback

_is_built = tf_keras_hooks.is_built


def _build_optimizer(optimizer, model):
    """Creates the optimizer's variables now if it can; False if only its first step can."""
    if _is_built(optimizer):
        return True
    build = getattr(optimizer, "build", None)
    if build is None:  # legacy tf_keras optimizers create their slots in apply_gradients
        return False
    build(model.trainable_variables)
    return True


class BroadcastGlobalVariablesCallback(_epoch_end.EndEpochTogether, util.NoXlaMixin, util.Callback):
    """Broadcasts the model's and the optimizer's variables from `root_rank` once.

    At the start of the first `fit()` every rank receives root_rank's weights and optimizer
    state (slots, iterations), so that all ranks take their first step from identical values,
    e.g. after rank 0 alone loaded a checkpoint. An unbuilt optimizer is built first. The
    broadcast happens once per callback instance: a later `fit()` with the same callback
    does not repeat it. What only the first step creates is broadcast at the end of that
    step instead: the variables of a model that is not built yet (a subclassed model; call
    `model.build(input_shape)` before fit() so that the first step starts from identical
    weights too) and the slots of legacy tf_keras optimizers, which have no `build()`.

    Args:
        root_rank: the rank whose values every rank receives.
        device: a device for the broadcast (`tf.device` string); '' leaves TF's placement.
        local_variables: model variables (one, or a list) each rank keeps its own values of,
            as Horovod's: those of local layers (PartialDistributedOptimizer).

    Example:
        >>> model.fit(x, y, callbacks=[
        ...     tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0)])
    """

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.local_variables = gradients.LocalVariables()
        if local_variables is not None:
            listed = local_variables if isinstance(local_variables, (list, tuple)) else \
                [local_variables]
            for v in listed:
                self.local_variables.add(v)
        if isinstance(root_rank, bool) or not isinstance(root_rank, numbers.Integral):
            raise ValueError(f"`root_rank` must be an integer rank. Received: "
                             f"root_rank={root_rank!r}")
        self.root_rank = int(root_rank)
        self.device = device
        self.broadcast_done = False
        self._model_pending = True
        self._optimizer_pending = True
        tf_keras_hooks.skip_logs_conversion(self)  # it never reads logs

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        optimizer = util.optimizer_of(self.model, type(self).__name__)
        if not self.model.variables:
            # The first step builds the model (a subclassed tf_keras model) and then the
            # optimizer on its variables: broadcast both at the end of that step.
            return
        self._broadcast(model=True, optimizer=_build_optimizer(optimizer, self.model))

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast(model=True, optimizer=True)

    def _broadcast(self, model, optimizer):
        device = tf.device(self.device) if self.device else contextlib.nullcontext()
        with device:
            if model and self._model_pending:
                functions.broadcast_variables(
                    [v for v in self.model.variables if v not in self.local_variables],
                    self.root_rank, name="BroadcastGlobalVariablesCallback.model")
                self._model_pending = False
            if optimizer and self._optimizer_pending:
                functions.broadcast_variables(
                    _epoch_end.optimizer_variables(self.model.optimizer), self.root_rank,
                    name="BroadcastGlobalVariablesCallback.optimizer")
                sharded = getattr(self.model.optimizer, "_sharded", None)
                if sharded is not None:  # root's loaded checkpoint, block by block
                    sharded.checkpoint.scatter_loaded(self.root_rank)
                self._optimizer_pending = False
        self.broadcast_done = not (self._model_pending or self._optimizer_pending)


# MetricAverageCallback

def _numeric_array(value):
    """`value` as a numpy array if it is a number or numeric array/tensor, else None."""
    if isinstance(value, (bool, np.bool_, str, bytes, dict)):
        return None
    try:
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except (TypeError, ValueError):
        return None
    return array if array.dtype.kind in "iuf" else None


def _average_logs_in_place(logs):
    # Sorted keys: every rank submits the same names in the same order.
    for key in sorted(logs):
        array = _numeric_array(logs[key])
        if array is None:
            continue
        # float64: the mean of float metrics without float32 rounding, and no integer floor.
        mean = _values.allreduce(array.astype(np.float64),
                                 name=f"metric_average.{key}").numpy()
        logs[key] = float(mean) if mean.ndim == 0 else mean


class MetricAverageCallback(_epoch_end.EndEpochTogether, util.NoXlaMixin, util.Callback):
    """Replaces every numeric metric in the epoch's logs by its mean over all ranks.

    Each rank computes its metrics on its own shard of the data; at the end of each epoch
    this callback averages them (loss, accuracy, val_* ...), so that every rank, and every
    callback listed after this one (checkpoints, early stopping, TensorBoard, History, the
    progress bar), sees the global values. List it before any callback that reads the logs.
    Numbers become Python floats; numeric arrays become float64 arrays; other values are
    left as they are. Every rank must log the same keys.

    Args:
        device: accepted for Horovod compatibility and ignored.

    Example:
        >>> model.fit(x, y, validation_data=(vx, vy), callbacks=[
        ...     tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0),
        ...     tfring.keras.callbacks.MetricAverageCallback(),
        ...     keras.callbacks.EarlyStopping(monitor="val_loss")])
    """

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)  # ranks with less data catch up first
        if logs:
            _average_logs_in_place(logs)


# BestModelCheckpoint

_HOOKS = (
    "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_batch_begin",
    "on_batch_end", "on_train_batch_begin", "on_train_batch_end", "on_test_begin",
    "on_test_end", "on_test_batch_begin", "on_test_batch_end", "on_predict_begin",
    "on_predict_end", "on_predict_batch_begin", "on_predict_batch_end",
)


class StragglerReportCallback(util.Callback):
    """Prints the straggler report's line (tfring.straggler_report()) at the end of each
    epoch, on rank 0: which ranks held the others back since training began, and whether
    slow every step or once. Give it to every rank; the others print nothing. It adds no
    collective to the step (the runtime compares the ranks' waits on its own, about once a
    second), so the last second of an epoch shows in the next epoch's line.

    Args:
        print_fn: what prints the line (default: `print`), e.g. a logger's `info`.

    Example:
        >>> model.fit(x, y, epochs=5, callbacks=[
        ...     tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0),
        ...     tfring.keras.callbacks.StragglerReportCallback()])
        epoch 1: straggler report over 2.004 s (41 cycles): rank 1 held the others up ...
    """

    def __init__(self, print_fn=print):
        super().__init__()
        self._print = print_fn

    def on_epoch_end(self, epoch, logs=None):
        if runtime.rank() != 0:
            return
        report = straggler_report()
        self._print(f"epoch {epoch + 1}: " +
                    report.get("summary", "straggler report: no comparison yet (the ranks' "
                                          "waits reach rank 0 about once a second)"))


def _root_only(hook_name):
    def hook(self, *args, **kwargs):
        if runtime.rank() == 0:
            return getattr(util.ModelCheckpoint, hook_name)(self, *args, **kwargs)
        return None
    hook.__name__ = hook.__qualname__ = hook_name
    return hook


class BestModelCheckpoint(util.NoXlaMixin, util.ModelCheckpoint):
    """Saves the model whenever `monitor` improves, on rank 0 only.

    A `ModelCheckpoint` with save_best_only=True. Only rank 0 writes (and reads) files;
    on the other ranks the callback does nothing, so every rank can be given the same
    callbacks. List MetricAverageCallback before it, so that the monitored value is the
    average over ranks rather than rank 0's alone.

    Args:
        filepath: where to save (Keras 3 needs a `.keras` file); may contain `{epoch}` and
            the names of logged metrics, as in ModelCheckpoint.
        monitor: the logged metric to watch.
        verbose: 1 prints a line when a model is saved.
        mode: 'auto', 'min' or 'max': whether a lower or higher `monitor` is better.
        save_freq: 'epoch', or save after this many batches.

    Example:
        >>> model.fit(x, y, validation_data=(vx, vy), callbacks=[
        ...     tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0),
        ...     tfring.keras.callbacks.MetricAverageCallback(),
        ...     tfring.keras.callbacks.BestModelCheckpoint("best.keras", monitor="val_loss")])
    """

    def __init__(self, filepath, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch"):
        super().__init__(filepath, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=False, mode=mode, save_freq=save_freq)


# Only the hooks ModelCheckpoint implements; wrapping the others would make tf_keras call
# them at every batch for nothing.
for _name in _HOOKS:
    if getattr(util.ModelCheckpoint, _name, None) is not getattr(util.Callback, _name, None):
        setattr(BestModelCheckpoint, _name, _root_only(_name))
del _name
