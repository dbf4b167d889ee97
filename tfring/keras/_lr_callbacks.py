"""LearningRateScheduleCallback and LearningRateWarmupCallback (tfring.keras.callbacks
re-exports them): the learning rate as a function of the epoch, with Goyal et al.'s
momentum correction for SGD."""

import math
import numbers
import sys
import warnings

import tensorflow as tf

from tfring._process import runtime
from tfring._adapters import keras3
from tfring._adapters import tf_keras as tf_keras_hooks
from tfring.keras import _callback_util as util
from tfring.keras import _epoch_end

# SGD, whose momentum buffers hold learning_rate * gradient (velocity form), so that
# scaling them by new_lr / old_lr is Goyal et al.'s momentum correction. Other optimizers
# with a "momentums" attribute (Lion, Muon) keep plain gradient averages: never scale those.
def _sgd_classes():
    import keras
    classes = [keras.optimizers.SGD]
    if "tf_keras" in sys.modules:  # imported by whoever made a tf_keras optimizer
        import tf_keras
        classes += [tf_keras.optimizers.SGD, tf_keras.optimizers.legacy.SGD]
    return tuple(classes)


def _is_schedule(value):
    # A LearningRateSchedule, or any callable Keras would call for the learning rate;
    # variables and tensors are values, not schedules.
    return callable(value) and not isinstance(value, (tf.Variable, tf.Tensor)) and \
        not hasattr(value, "assign")


def _learning_rate_schedule(optimizer):
    """The schedule that drives the optimizer's learning rate, or None for a float one."""
    inner = util.innermost(optimizer)
    candidates = [optimizer.learning_rate, keras3.learning_rate_schedule(inner),
                  tf_keras_hooks.legacy_learning_rate(inner)]
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
    return 0.0 if momentum is None else util.as_float(momentum)


def _is_sgd(optimizer):
    return isinstance(optimizer, _sgd_classes())


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
        optimizer = util.innermost(optimizer)
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


class LearningRateScheduleCallback(_epoch_end.EndEpochTogether, util.NoXlaMixin, util.Callback):
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
        self.initial_lr = util.check_positive_number("initial_lr", initial_lr)
        self.multiplier, self.staircase = self._multiplier_function(multiplier, staircase)
        self.start_epoch, self.end_epoch = self._check_epochs(start_epoch, end_epoch)
        self.momentum_correction = bool(momentum_correction)
        self.steps_per_epoch = util.check_optional_positive_int("steps_per_epoch", steps_per_epoch)
        self.current_epoch = None
        self._steps = steps_per_epoch
        self._correction = _MomentumCorrection(type(self).__name__)
        tf_keras_hooks.skip_logs_conversion(self)  # it never reads batch logs

    @staticmethod
    def _multiplier_function(multiplier, staircase):
        if callable(multiplier):
            return multiplier, bool(staircase)
        if isinstance(multiplier, bool) or not isinstance(multiplier, numbers.Real):
            raise ValueError("`multiplier` must be a number or a function of the epoch. "
                             f"Received: multiplier={multiplier!r}")
        # A constant is exponential decay, multiplier ** epoch, per epoch or (staircase=False)
        # per batch at the fractional epoch, as Horovod 0.28 (horovod/_keras/callbacks.py).
        return (lambda epoch: multiplier ** epoch), bool(staircase)

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
        schedule = _learning_rate_schedule(util.optimizer_of(self.model, who))
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
            logs["learning_rate"] = logs["lr"] = util.as_float(self.model.optimizer.learning_rate)

    def _in_range(self, epoch):
        return epoch is not None and self.start_epoch <= epoch and \
            (self.end_epoch is None or epoch < self.end_epoch)

    def _set_learning_rate(self, new_lr):
        optimizer = self.model.optimizer
        old_lr = util.as_float(optimizer.learning_rate)
        try:
            optimizer.learning_rate = float(new_lr)
        except TypeError as e:  # Keras refuses to replace a LearningRateSchedule
            schedule = _learning_rate_schedule(optimizer) or optimizer.learning_rate
            raise _schedule_error(type(self).__name__, schedule) from e
        # The ratio of the rates the optimizer really holds (float32), not of the requests.
        new_lr = util.as_float(optimizer.learning_rate)
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
        self.warmup_epochs = util.check_positive_number("warmup_epochs", warmup_epochs)
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
                      f"{util.as_float(self.model.optimizer.learning_rate):g}.")
        super().on_epoch_end(epoch, logs)
