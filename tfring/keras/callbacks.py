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
import math
import numbers
import warnings
import weakref

import numpy as np
import tensorflow as tf

from tfring import _gradients, collectives, functions, runtime
from tfring.keras import _values, _xla

# Resolved now: Keras 3 normally, tf_keras when TF_USE_LEGACY_KERAS=1 was set before import.
_Callback = tf.keras.callbacks.Callback
_ModelCheckpoint = tf.keras.callbacks.ModelCheckpoint

__all__ = [
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateWarmupCallback",
    "LearningRateScheduleCallback", "BestModelCheckpoint",
]

# SGD classes whose momentum buffers hold learning_rate * gradient (velocity form), so that
# scaling them by new_lr / old_lr is Goyal et al.'s momentum correction. Other optimizers
# with a "momentums" attribute (Lion, Muon) keep plain gradient averages: never scale those.
_SGD_CLASSES = frozenset([
    ("keras.src.optimizers.sgd", "SGD"),
    ("tf_keras.src.optimizers.sgd", "SGD"),
    ("tf_keras.src.optimizers.legacy.gradient_descent", "SGD"),
])


# Helpers shared by the callbacks.

class _NoXlaMixin:
    """Turns XLA off for the model a callback is attached to (before Keras traces the step)."""

    def set_model(self, model):
        _xla.disable_jit_compile(model, type(self).__name__)
        super().set_model(model)


def _innermost(optimizer):
    """Follows `inner_optimizer` (DistributedOptimizer, LossScaleOptimizer) to the real one."""
    seen = set()
    while getattr(optimizer, "inner_optimizer", None) is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        optimizer = optimizer.inner_optimizer
    return optimizer


def _as_float(value):
    """A Python float from a float, numpy value, tensor or (Keras) variable."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(np.asarray(value))


def _check_positive_number(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a number > 0. Received: {name}={value!r}")
    return value


def _check_optional_positive_int(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                              or value <= 0):
        raise ValueError(f"`{name}` must be an integer > 0 or None. Received: {name}={value!r}")
    return value


def _optimizer_of(model, who):
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise ValueError(f"{who} needs a compiled model: call model.compile(optimizer=...) "
                         "before fit().")
    return optimizer


# Ending epochs together (uneven data)

# model -> {"start": optimizer iterations at the epoch's start, "joined": bool}; weak, so a
# model that goes takes its entry with it.
_epochs = weakref.WeakKeyDictionary()


def _iterations(model):
    optimizer = getattr(model, "optimizer", None)
    iterations = getattr(optimizer, "iterations", None)
    return 0 if iterations is None else int(_as_float(iterations))


def _end_epoch_together(model):
    """Joins, then, if ranks ran different numbers of steps this epoch, gives every rank the
    weights and optimizer state of the rank that ran the most. Once per epoch and model."""
    state = _epochs.get(model)
    if state is None or state["joined"]:
        return
    state["joined"] = True
    collectives.join()
    steps = _iterations(model) - state["start"]
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
    functions.broadcast_variables(_optimizer_variables(model.optimizer), root,
                                    name="tfring.keras.epoch_end.optimizer")


class _EndEpochTogether:
    """Mixin of the callbacks that end each epoch with `_end_epoch_together`. A subclass
    that overrides on_epoch_begin or on_epoch_end calls super() first."""

    def on_epoch_begin(self, epoch, logs=None):
        _epochs[self.model] = {"start": _iterations(self.model), "joined": False}
        super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        _end_epoch_together(self.model)
        super().on_epoch_end(epoch, logs)


# BroadcastGlobalVariablesCallback

def _optimizer_variables(optimizer):
    # Keras 3: a list property; tf_keras: a CallableList property; legacy tf_keras: a method.
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _is_built(optimizer):
    built = getattr(optimizer, "built", None)
    return bool(getattr(optimizer, "_built", False) if built is None else built)


def _build_optimizer(optimizer, model):
    """Creates the optimizer's variables now if it can; False if only its first step can."""
    if _is_built(optimizer):
        return True
    build = getattr(optimizer, "build", None)
    if build is None:  # legacy tf_keras optimizers create their slots in apply_gradients
        return False
    build(model.trainable_variables)
    return True


class BroadcastGlobalVariablesCallback(_EndEpochTogether, _NoXlaMixin, _Callback):
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
        self.local_variables = _gradients.LocalVariables()
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
        self._supports_tf_logs = True  # tf_keras: it never reads logs, skip their conversion

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        optimizer = _optimizer_of(self.model, type(self).__name__)
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
                    _optimizer_variables(self.model.optimizer), self.root_rank,
                    name="BroadcastGlobalVariablesCallback.optimizer")
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


class MetricAverageCallback(_EndEpochTogether, _NoXlaMixin, _Callback):
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


# LearningRateScheduleCallback and LearningRateWarmupCallback

def _is_schedule(value):
    # A LearningRateSchedule, or any callable Keras would call for the learning rate;
    # variables and tensors are values, not schedules.
    return callable(value) and not isinstance(value, (tf.Variable, tf.Tensor)) and \
        not hasattr(value, "assign")


def _learning_rate_schedule(optimizer):
    """The schedule that drives the optimizer's learning rate, or None for a float one."""
    inner = _innermost(optimizer)
    hypers = getattr(inner, "_hyper", None)  # legacy tf_keras keeps it among its hypers
    candidates = [optimizer.learning_rate, getattr(inner, "_learning_rate", None),
                  hypers.get("learning_rate") if isinstance(hypers, dict) else None]
    return next((c for c in candidates if _is_schedule(c)), None)


def _schedule_error(who, schedule):
    return ValueError(
        f"{who} needs an optimizer with a float learning rate, but this optimizer's learning "
        f"rate is a {type(schedule).__name__}, which the callback cannot set. Create the "
        "optimizer with a float, e.g. keras.optimizers.SGD(learning_rate=0.1), and let the "
        "callback change it.")


def _momentum_value(optimizer):
    momentum = getattr(optimizer, "momentum", None)
    if callable(momentum) and not hasattr(momentum, "numpy"):
        momentum = momentum()
    return 0.0 if momentum is None else _as_float(momentum)


def _is_sgd(optimizer):
    return any((cls.__module__, cls.__name__) in _SGD_CLASSES for cls in type(optimizer).__mro__)


def _sgd_momentum_buffers(optimizer, model):
    """The SGD velocity variables that exist now (none before the first step is possible)."""
    if hasattr(optimizer, "get_slot"):  # legacy tf_keras: one "momentum" slot per variable
        buffers = []
        for variable in model.trainable_variables:
            try:
                buffers.append(optimizer.get_slot(variable, "momentum"))
            except (KeyError, ValueError):  # slots are created in the first step
                pass
        return buffers
    return [m for m in getattr(optimizer, "momentums", None) or [] if m is not None]


class _MomentumCorrection:
    """Scales SGD's velocity by new_lr / old_lr whenever a callback changes the lr.

    Keras SGD keeps v = momentum * v - lr * g. Goyal et al. correct a learning rate change
    by scaling the next step's momentum by new_lr / old_lr (Horovod does it by changing
    `optimizer.momentum` for one batch, which does nothing in Keras 3, where the momentum is
    a constant of the traced step). Scaling v itself by new_lr / old_lr gives the same next
    step: momentum * (v * new / old) - new * g.
    """

    def __init__(self, who):
        self._who = who
        self._warned = False

    def apply(self, optimizer, model, factor):
        optimizer = _innermost(optimizer)
        if _momentum_value(optimizer) == 0:
            return
        if not _is_sgd(optimizer):
            self._warn_once(optimizer)
            return
        for buffer in _sgd_momentum_buffers(optimizer, model):
            buffer.assign(tf.convert_to_tensor(buffer) * tf.cast(factor, buffer.dtype))

    def _warn_once(self, optimizer):
        if not self._warned:
            self._warned = True
            warnings.warn(f"{self._who}: momentum correction is implemented for SGD only; "
                          f"skipping it for {type(optimizer).__name__}. Pass "
                          "momentum_correction=False to silence this warning.", stacklevel=4)


class LearningRateScheduleCallback(_EndEpochTogether, _NoXlaMixin, _Callback):
    """Sets the learning rate to `initial_lr * multiplier(epoch)` from start_epoch to end_epoch.

    With staircase=True the rate changes at the beginning of each epoch in
    [start_epoch, end_epoch), from the integer epoch; with staircase=False it changes at the
    beginning of each batch, from the fractional epoch `epoch + batch / steps_per_epoch`.
    Outside that range the rate is left as it is. The optimizer must have a float learning
    rate (not a LearningRateSchedule). At each epoch's end the current rate is logged as
    `logs["learning_rate"]`.

    Args:
        initial_lr: the base learning rate (usually already scaled by the number of ranks).
        multiplier: a number, or a function of the epoch (an int with staircase=True, a
            float otherwise) returning the factor. A number implies staircase=True.
        start_epoch: the first epoch (0-based) the schedule applies to.
        end_epoch: the epoch at which it stops applying (exclusive); None: never stops.
        staircase: change the rate once per epoch (True) or at every batch (False).
        momentum_correction: scale SGD's momentum buffers by new_lr / old_lr whenever the
            rate changes (Goyal et al., 2017); warns once and skips other optimizers that
            have a nonzero momentum.
        steps_per_epoch: batches per epoch, needed with staircase=False; by default the
            number Keras knows for this fit().

    Example:
        >>> # Divide the rate by 10 at epochs 30 and 60.
        >>> callbacks = [
        ...     tfring.keras.callbacks.LearningRateScheduleCallback(
        ...         0.1 * size, multiplier=1.0, start_epoch=0, end_epoch=30),
        ...     tfring.keras.callbacks.LearningRateScheduleCallback(
        ...         0.1 * size, multiplier=0.1, start_epoch=30, end_epoch=60),
        ...     tfring.keras.callbacks.LearningRateScheduleCallback(
        ...         0.1 * size, multiplier=0.01, start_epoch=60)]
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = _check_positive_number("initial_lr", initial_lr)
        self.multiplier, self.staircase = self._multiplier_function(multiplier, staircase)
        self.start_epoch, self.end_epoch = self._check_epochs(start_epoch, end_epoch)
        self.momentum_correction = bool(momentum_correction)
        self.steps_per_epoch = _check_optional_positive_int("steps_per_epoch", steps_per_epoch)
        self.current_epoch = None
        self._steps = steps_per_epoch
        self._correction = _MomentumCorrection(type(self).__name__)
        self._supports_tf_logs = True  # tf_keras: it never reads batch logs

    @staticmethod
    def _multiplier_function(multiplier, staircase):
        if callable(multiplier):
            return multiplier, bool(staircase)
        if isinstance(multiplier, bool) or not isinstance(multiplier, numbers.Real):
            raise ValueError("`multiplier` must be a number or a function of the epoch. "
                             f"Received: multiplier={multiplier!r}")
        # A constant needs no per-batch updates (Horovod does the same).
        return (lambda epoch: multiplier), True

    @staticmethod
    def _check_epochs(start_epoch, end_epoch):
        if isinstance(start_epoch, bool) or not isinstance(start_epoch, numbers.Real) or \
                start_epoch < 0:
            raise ValueError(f"`start_epoch` must be a number >= 0. Received: "
                             f"start_epoch={start_epoch!r}")
        if end_epoch is not None and (isinstance(end_epoch, bool) or
                                      not isinstance(end_epoch, numbers.Real) or
                                      end_epoch <= start_epoch):
            raise ValueError(f"`end_epoch` must be None or a number > start_epoch "
                             f"({start_epoch}). Received: end_epoch={end_epoch!r}")
        return start_epoch, end_epoch

    def on_train_begin(self, logs=None):
        who = type(self).__name__
        schedule = _learning_rate_schedule(_optimizer_of(self.model, who))
        if schedule is not None:
            raise _schedule_error(who, schedule)
        if not self.staircase:
            self._steps = self.steps_per_epoch or self._steps_from_keras()

    def _steps_from_keras(self):
        steps = (self.params or {}).get("steps")
        if not steps:
            raise ValueError(
                f"{type(self).__name__} changes the learning rate at every batch and needs "
                "the number of batches per epoch, which Keras does not know for this input "
                "(e.g. a dataset of unknown length). Pass `steps_per_epoch=` to "
                f"{type(self).__name__}(...).")
        return int(steps)

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._set_learning_rate(self.initial_lr * self.multiplier(epoch))

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self._in_range(self.current_epoch):
            return
        epoch = self.current_epoch + batch / self._steps
        self._set_learning_rate(self.initial_lr * self.multiplier(epoch))

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if logs is not None:  # Keras 3's key, and Horovod's "lr"
            logs["learning_rate"] = logs["lr"] = _as_float(self.model.optimizer.learning_rate)

    def _in_range(self, epoch):
        return epoch is not None and self.start_epoch <= epoch and \
            (self.end_epoch is None or epoch < self.end_epoch)

    def _set_learning_rate(self, new_lr):
        optimizer = self.model.optimizer
        old_lr = _as_float(optimizer.learning_rate)
        try:
            optimizer.learning_rate = float(new_lr)
        except TypeError as e:  # Keras refuses to replace a LearningRateSchedule
            schedule = _learning_rate_schedule(optimizer) or optimizer.learning_rate
            raise _schedule_error(type(self).__name__, schedule) from e
        # The ratio of the rates the optimizer really holds (float32), not of the requests.
        new_lr = _as_float(optimizer.learning_rate)
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr:
            self._correction.apply(optimizer, self.model, new_lr / old_lr)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from `initial_lr / size` up to `initial_lr` (Goyal et al.).

    At the beginning of each batch of the first `warmup_epochs` epochs the rate is
    `initial_lr / size * (epoch_f * (size - 1) / warmup_epochs + 1)` with
    `epoch_f = epoch + (batch + 1) / steps_per_epoch`, as Horovod's: one batch above the
    single-process rate at the first batch, rising linearly to `initial_lr` at the last
    batch of the warmup, where it stays (add a LearningRateScheduleCallback for later
    changes).

    Args:
        initial_lr: the rate at the end of warmup (usually the single-process rate times
            the number of ranks).
        warmup_epochs: how many epochs the ramp lasts (> 0).
        momentum_correction: scale SGD's momentum buffers by new_lr / old_lr at each change
            (see LearningRateScheduleCallback).
        steps_per_epoch: batches per epoch; by default the number Keras knows for this fit().
        verbose: 1 prints a line on rank 0 when warmup ends.

    Example:
        >>> opt = keras.optimizers.SGD(0.1 * tfring.keras.size(), momentum=0.9)
        >>> model.fit(x, y, epochs=90, callbacks=[
        ...     tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0),
        ...     tfring.keras.callbacks.MetricAverageCallback(),
        ...     tfring.keras.callbacks.LearningRateWarmupCallback(
        ...         initial_lr=0.1 * tfring.keras.size(), warmup_epochs=5, verbose=1)])
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        self.warmup_epochs = _check_positive_number("warmup_epochs", warmup_epochs)
        self.verbose = verbose
        super().__init__(initial_lr, self._warmup_multiplier, start_epoch=0,
                         end_epoch=math.ceil(warmup_epochs), staircase=False,
                         momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)

    def _warmup_multiplier(self, epoch):
        # As Horovod: one batch ahead (batch b of epoch e is at e + (b+1)/steps), so each
        # epoch's last batch runs at a round number and the warmup's last at initial_lr.
        # Clamped: with a fractional warmup_epochs the last warmup epoch passes its end.
        epoch = min(epoch + 1.0 / self._steps, self.warmup_epochs)
        size = runtime.size()
        return 1.0 / size * (epoch * (size - 1) / self.warmup_epochs + 1)

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.end_epoch - 1:
            # Training goes on at initial_lr (the last batch already ran at it).
            self._set_learning_rate(self.initial_lr)
            if self.verbose and runtime.rank() == 0:
                print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                      f"{_as_float(self.model.optimizer.learning_rate):g}.")
        super().on_epoch_end(epoch, logs)


# BestModelCheckpoint

_HOOKS = (
    "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_batch_begin",
    "on_batch_end", "on_train_batch_begin", "on_train_batch_end", "on_test_begin",
    "on_test_end", "on_test_batch_begin", "on_test_batch_end", "on_predict_begin",
    "on_predict_end", "on_predict_batch_begin", "on_predict_batch_end",
)


def _root_only(hook_name):
    def hook(self, *args, **kwargs):
        if runtime.rank() == 0:
            return getattr(_ModelCheckpoint, hook_name)(self, *args, **kwargs)
        return None
    hook.__name__ = hook.__qualname__ = hook_name
    return hook


class BestModelCheckpoint(_NoXlaMixin, _ModelCheckpoint):
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
    if getattr(_ModelCheckpoint, _name, None) is not getattr(_Callback, _name, None):
        setattr(BestModelCheckpoint, _name, _root_only(_name))
del _name
