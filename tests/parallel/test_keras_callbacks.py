"""tfring.keras.callbacks with Keras 3 and plain Keras optimizers: every rank asserts.

Each rank trains a tiny Dense model on its own data; expected values are computed with numpy
from quantities every rank knows (seeds, sizes), never from the code under test.
"""

import os
import shutil
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring.keras import callbacks as hvd_callbacks

FEATURES = 3
BATCH = 4
STEPS = 4  # batches per epoch
LR = 0.2


def make_data(seed, steps=STEPS):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * BATCH, FEATURES)).astype(np.float32)
    y = rng.normal(size=(steps * BATCH, 1)).astype(np.float32)
    return x, y


def initial_weights(seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(FEATURES, 1)).astype(np.float32),
            rng.normal(size=(1,)).astype(np.float32)]


def make_model(seed=0, optimizer=None, **compile_args):
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
    model.set_weights(initial_weights(seed))
    model.compile(optimizer=optimizer or keras.optimizers.SGD(LR), loss="mse", **compile_args)
    return model


def fit(model, callbacks, rank, epochs=1, **kwargs):
    x, y = make_data(100 + rank)
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=callbacks, **kwargs)


class Recorder(keras.callbacks.Callback):
    """Calls `fn(epoch, batch)` at each batch's beginning and keeps what it returns.

    With per_epoch=True it records at each epoch's beginning instead, as (epoch, None).
    """

    def __init__(self, fn, per_epoch=False):
        super().__init__()
        self.fn = fn
        self.per_epoch = per_epoch
        self.records = {}
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        if self.per_epoch:
            self.records[(epoch, None)] = self.fn(epoch, None)

    def on_train_batch_begin(self, batch, logs=None):
        if not self.per_epoch:
            self.records[(self.epoch, batch)] = self.fn(self.epoch, batch)


def learning_rate_of(model):
    return lambda epoch, batch: float(model.optimizer.learning_rate.numpy())


# BroadcastGlobalVariablesCallback

def optimizer_state_values(optimizer, seed):
    """Rank-specific values for every optimizer variable (iterations, lr, momentums)."""
    rng = np.random.default_rng(seed)
    values = []
    for v in optimizer.variables:
        if v.dtype in ("int64", "int32"):
            values.append(np.full(v.shape, seed, dtype=v.dtype))
        else:
            values.append(rng.normal(size=v.shape).astype(v.dtype))
    return values


def test_broadcast_gives_every_rank_root_weights_and_optimizer_state(rank, size):
    root = size - 1  # not rank 0, so that root_rank is really used
    model = make_model(seed=rank, optimizer=keras.optimizers.SGD(LR, momentum=0.9))
    model.optimizer.build(model.trainable_variables)
    for v, value in zip(model.optimizer.variables, optimizer_state_values(model.optimizer, rank)):
        v.assign(value)
    seen = Recorder(lambda e, b: ([w.numpy() for w in model.weights],
                                  [v.numpy() for v in model.optimizer.variables]))
    callback = hvd_callbacks.BroadcastGlobalVariablesCallback(root)
    fit(model, [callback, seen], rank)

    # Every rank recomputes root's starting values from root's seed.
    weights, optimizer_values = seen.records[(0, 0)]
    for got, want in zip(weights, initial_weights(root)):
        np.testing.assert_array_equal(got, want)
    expected_state = optimizer_state_values(model.optimizer, root)
    assert len(optimizer_values) == len(expected_state) >= 3  # iterations, lr, 2 momentums
    for got, want in zip(optimizer_values, expected_state):
        np.testing.assert_array_equal(got, want)
    assert callback.broadcast_done


def test_broadcast_builds_the_optimizer_and_happens_once_per_instance(rank, size):
    model = make_model(seed=rank, optimizer=keras.optimizers.SGD(LR, momentum=0.5))
    assert not model.optimizer.built
    weights_at_start = Recorder(lambda e, b: [w.numpy() for w in model.weights])
    callback = hvd_callbacks.BroadcastGlobalVariablesCallback(0)
    fit(model, [callback, weights_at_start], rank)
    assert model.optimizer.built
    for got, want in zip(weights_at_start.records[(0, 0)], initial_weights(0)):
        np.testing.assert_array_equal(got, want)

    # A second fit() with the same callback keeps each rank's own (here: reset) weights.
    model.set_weights(initial_weights(50 + rank))
    weights_at_start.records.clear()
    fit(model, [callback, weights_at_start], rank)
    for got, want in zip(weights_at_start.records[(0, 0)], initial_weights(50 + rank)):
        np.testing.assert_array_equal(got, want)


class Subclassed(keras.Model):
    """Its variables exist only once the first step has run."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)


def assert_same_as_rank_0(arrays, label):
    for i, a in enumerate(arrays):
        root = tfring.broadcast(tf.constant(a), 0, name=f"callbacks.{label}.{i}").numpy()
        np.testing.assert_array_equal(a, root, err_msg=f"{label}: variable {i}")


def test_broadcast_of_an_unbuilt_model_happens_after_its_first_step(rank, size):
    keras.utils.set_random_seed(rank)  # each rank initializes its own weights
    model = Subclassed()
    model.compile(optimizer=keras.optimizers.SGD(LR, momentum=0.9), loss="mse")
    state = Recorder(lambda e, b: [v.numpy() for v in model.variables + model.optimizer.variables])
    callback = hvd_callbacks.BroadcastGlobalVariablesCallback(0)
    fit(model, [callback, state], rank)
    assert callback.broadcast_done
    assert len(state.records[(0, 1)]) >= 2 + 4  # kernel, bias; iterations, lr, 2 momentums
    assert_same_as_rank_0(state.records[(0, 1)], "unbuilt")


def test_broadcast_then_training_keeps_ranks_identical_with_averaged_gradients(rank, size):
    # Each rank starts from its own weights and trains on its own data: only the broadcast
    # (rank 0's weights everywhere) and averaged gradients keep the ranks identical, and the
    # result is one process's SGD on the ranks' batches together, computed here in numpy.
    import tfring.keras as hvd_keras
    model = make_model(seed=rank, optimizer=hvd_keras.DistributedOptimizer(
        keras.optimizers.SGD(LR)))
    fit(model, [hvd_callbacks.BroadcastGlobalVariablesCallback(0)], rank)
    for i, w in enumerate(model.get_weights()):
        root = tfring.broadcast(tf.constant(w), 0, name=f"callbacks.identical.{i}").numpy()
        np.testing.assert_array_equal(w, root)
    w, b, _ = numpy_sgd(size)
    np.testing.assert_allclose(model.get_weights()[0], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[1], b, rtol=1e-5, atol=1e-6)


def numpy_sgd(size):
    """One process's SGD(LR) from rank 0's weights on the ranks' batches together, in numpy:
    the weights after one epoch (fit's data), and the epoch's mean loss (each step's loss
    before its update, as Keras logs it: the mean of the ranks' losses, equal batches)."""
    w, b = (a.astype(np.float64) for a in initial_weights(0))
    data = [make_data(100 + r) for r in range(size)]
    losses = []
    for step in range(STEPS):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        x = np.concatenate([d[0][rows] for d in data]).astype(np.float64)
        y = np.concatenate([d[1][rows] for d in data]).astype(np.float64)
        error = x @ w + b - y  # d(mean squared error)/d(prediction) * n / 2
        losses.append(np.mean(error ** 2))
        w = w - LR * 2 * x.T @ error / len(x)
        b = b - LR * 2 * error.sum(0) / len(x)
    return w, b, np.mean(losses)


# MetricAverageCallback

class InjectLogs(keras.callbacks.Callback):
    """Adds rank-specific values to the epoch logs and keeps a copy of them as they were."""

    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self.raw = []

    def on_epoch_end(self, epoch, logs=None):
        logs["rank_value"] = self.rank + 0.25 + epoch
        logs["rank_int"] = self.rank * 3
        logs["rank_array"] = np.array([self.rank, 2.0 * self.rank], np.float32)
        logs["note"] = "not a number"
        self.raw.append(dict(logs))


class CopyLogs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append(dict(logs))


def test_metric_average_gives_the_mean_over_ranks(rank, size):
    model = make_model(seed=0)
    inject, after = InjectLogs(rank), CopyLogs()
    history = fit(model, [inject, hvd_callbacks.MetricAverageCallback(), after], rank,
                  epochs=2, validation_data=make_data(200 + rank, steps=1))
    ranks = np.arange(size)
    for epoch in range(2):
        raw, averaged = inject.raw[epoch], after.seen[epoch]
        assert averaged["rank_value"] == pytest.approx(np.mean(ranks + 0.25 + epoch), abs=1e-12)
        assert averaged["rank_int"] == pytest.approx(np.mean(ranks * 3.0), abs=1e-12)
        np.testing.assert_allclose(averaged["rank_array"],
                                   [np.mean(ranks), np.mean(2.0 * ranks)], atol=1e-12)
        assert averaged["note"] == "not a number"
        # Each rank's own loss differs (own data): the mean of all ranks' raw values.
        for key in ("loss", "val_loss"):
            everyone = tfring.allgather(tf.constant([raw[key]], tf.float64),
                                        name=f"callbacks.raw.{key}.{epoch}").numpy()
            assert len(set(everyone.tolist())) == size  # the ranks really differ
            assert averaged[key] == pytest.approx(np.mean(everyone), rel=1e-12)
            # History comes after the user's callbacks: it records the averages.
            assert history.history[key][epoch] == averaged[key]


# LearningRateWarmupCallback and LearningRateScheduleCallback

def warmup_lr(initial_lr, size, warmup_epochs, epoch, batch, steps=STEPS):
    # Horovod's schedule: batch b of epoch e is at e + (b+1)/steps.
    epoch_f = epoch + (batch + 1) / steps
    return initial_lr / size * (epoch_f * (size - 1) / warmup_epochs + 1)


def test_warmup_sets_the_documented_rate_at_each_batch_and_ends_at_initial_lr(
        rank, size, capsys):
    initial_lr = 0.1 * size
    model = make_model(seed=0, optimizer=keras.optimizers.SGD(0.5))
    seen = Recorder(learning_rate_of(model))
    callback = hvd_callbacks.LearningRateWarmupCallback(initial_lr, warmup_epochs=2, verbose=1)
    history = fit(model, [callback, seen], rank, epochs=3)

    for epoch in range(3):
        for batch in range(STEPS):
            want = warmup_lr(initial_lr, size, 2, epoch, batch) if epoch < 2 else initial_lr
            assert seen.records[(epoch, batch)] == pytest.approx(want, rel=1e-6), (epoch, batch)
    first = initial_lr / size * ((1 / STEPS) * (size - 1) / 2 + 1)
    assert seen.records[(0, 0)] == pytest.approx(first, rel=1e-6)
    assert float(model.optimizer.learning_rate.numpy()) == np.float32(initial_lr)
    # Logged at each epoch end: the last warmup epoch already ends at initial_lr.
    assert history.history["lr"] == history.history["learning_rate"]  # Horovod's key too
    np.testing.assert_allclose(history.history["learning_rate"],
                               [warmup_lr(initial_lr, size, 2, 0, STEPS - 1), initial_lr,
                                initial_lr], rtol=1e-6)
    printed = capsys.readouterr().out
    assert ("finished gradual learning rate warmup" in printed) == (rank == 0)


@pytest.mark.filterwarnings("ignore:Your input ran out of data")  # Keras, unknown length
def test_warmup_steps_per_epoch_explicit_and_missing(rank, size):
    x, y = make_data(100 + rank)
    unknown_length = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).filter(
        lambda a, b: True)
    model = make_model(seed=0)
    with pytest.raises(ValueError, match="steps_per_epoch="):
        model.fit(unknown_length, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd_callbacks.LearningRateWarmupCallback(LR, warmup_epochs=1)])

    seen = Recorder(learning_rate_of(model))
    model.fit(unknown_length, epochs=1, shuffle=False, verbose=0, callbacks=[
        hvd_callbacks.LearningRateWarmupCallback(LR, warmup_epochs=2, steps_per_epoch=2), seen])
    # steps_per_epoch=2 although the data has 4 batches: the documented formula still holds.
    for batch in range(STEPS):
        assert seen.records[(0, batch)] == pytest.approx(
            warmup_lr(LR, size, 2, 0, batch, steps=2), rel=1e-6)


def test_schedule_staircase_changes_the_rate_per_epoch_within_its_range(rank, size):
    model = make_model(seed=0, optimizer=keras.optimizers.SGD(0.3))
    seen = Recorder(learning_rate_of(model))
    callback = hvd_callbacks.LearningRateScheduleCallback(
        0.4, multiplier=lambda epoch: 0.5 ** epoch, start_epoch=1, end_epoch=3)
    fit(model, [callback, seen], rank, epochs=4)
    want_per_epoch = [0.3, 0.4 * 0.5, 0.4 * 0.25, 0.4 * 0.25]  # untouched outside [1, 3)
    for (epoch, batch), got in seen.records.items():
        assert got == pytest.approx(want_per_epoch[epoch], rel=1e-6), (epoch, batch)


def test_schedule_without_staircase_uses_the_fractional_epoch(rank, size):
    model = make_model(seed=0)
    seen = Recorder(learning_rate_of(model))
    callback = hvd_callbacks.LearningRateScheduleCallback(
        0.4, multiplier=lambda epoch: 1.0 / (1.0 + epoch), staircase=False, end_epoch=2)
    fit(model, [callback, seen], rank, epochs=2)
    for (epoch, batch), got in seen.records.items():
        assert got == pytest.approx(0.4 / (1.0 + epoch + batch / STEPS), rel=1e-6)


@pytest.mark.parametrize("staircase", [True, False])
def test_schedule_constant_multiplier_is_exponential_decay(rank, size, staircase):
    # As Horovod 0.28: a number m means initial_lr * m ** epoch, at the fractional epoch
    # without staircase.
    model = make_model(seed=0)
    seen = Recorder(learning_rate_of(model))
    fit(model, [hvd_callbacks.LearningRateScheduleCallback(0.4, 0.5, staircase=staircase),
                seen], rank, epochs=2)
    assert len(seen.records) == 2 * STEPS
    for (epoch, batch), got in seen.records.items():
        at = epoch if staircase else epoch + batch / STEPS
        assert got == pytest.approx(0.4 * 0.5 ** at, rel=1e-6), (epoch, batch)


def momentum_values(model):
    return [m.numpy() for m in model.optimizer.momentums]


@pytest.mark.parametrize("correction", [True, False])
def test_momentum_correction_scales_sgd_momentum_by_new_over_old(rank, size, correction):
    model = make_model(seed=0, optimizer=keras.optimizers.SGD(0.05, momentum=0.9))
    model.optimizer.build(model.trainable_variables)  # Keras builds it in the first step
    state = lambda e, b: (float(model.optimizer.learning_rate.numpy()), momentum_values(model))
    before, after = Recorder(state), Recorder(state)
    callback = hvd_callbacks.LearningRateScheduleCallback(
        0.05, multiplier=lambda epoch: 1.0 + epoch, staircase=False,
        momentum_correction=correction)
    fit(model, [before, callback, after], rank, epochs=2)

    changed = 0
    for key in before.records:
        (old_lr, old_m), (new_lr, new_m) = before.records[key], after.records[key]
        assert new_lr == pytest.approx(0.05 * (1.0 + key[0] + key[1] / STEPS), rel=1e-6)
        factor = new_lr / old_lr if correction else 1.0
        for got, m in zip(new_m, old_m):
            np.testing.assert_allclose(got, m * np.float32(factor), rtol=1e-6, atol=0)
        if np.any(old_m[0] != 0) and new_lr != old_lr:
            changed += 1
    assert changed >= 6  # the check above really compared nonzero, rescaled buffers


def test_momentum_correction_reaches_an_optimizer_inside_a_wrapper(rank, size):
    inner = keras.optimizers.SGD(0.05, momentum=0.9)
    model = make_model(seed=0, optimizer=keras.optimizers.LossScaleOptimizer(inner))
    model.optimizer.build(model.trainable_variables)
    state = lambda e, b: (float(model.optimizer.learning_rate.numpy()),
                          [m.numpy() for m in inner.momentums])
    # staircase=True: the rate changes at the epoch's beginning.
    before, after = Recorder(state, per_epoch=True), Recorder(state, per_epoch=True)
    callback = hvd_callbacks.LearningRateScheduleCallback(0.05, lambda epoch: 2.0 ** epoch)
    fit(model, [before, callback, after], rank, epochs=2)
    (old_lr, old_m), (new_lr, new_m) = before.records[(1, None)], after.records[(1, None)]
    assert (old_lr, new_lr) == pytest.approx((0.05, 0.1))
    assert np.any(old_m[0] != 0)
    for got, m in zip(new_m, old_m):
        np.testing.assert_allclose(got, m * 2.0, rtol=1e-6)


def test_momentum_correction_warns_once_for_other_optimizers_with_momentum(rank, size):
    model = make_model(seed=0, optimizer=keras.optimizers.RMSprop(0.01, momentum=0.5))
    callback = hvd_callbacks.LearningRateScheduleCallback(0.01, lambda epoch: 0.5 ** epoch,
                                                          staircase=False)
    with pytest.warns(UserWarning, match="momentum correction") as caught:
        fit(model, [callback], rank, epochs=2)
    assert len([w for w in caught if "momentum correction" in str(w.message)]) == 1

    model = make_model(seed=0, optimizer=keras.optimizers.Adam(0.01))  # no momentum: silent
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fit(model, [hvd_callbacks.LearningRateScheduleCallback(0.01, 0.5)], rank)


def test_schedule_on_a_learning_rate_schedule_optimizer_is_a_clear_error(rank, size):
    decay = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.9)
    for callback in (hvd_callbacks.LearningRateScheduleCallback(0.1, 0.5),
                     hvd_callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=1)):
        model = make_model(seed=0, optimizer=keras.optimizers.SGD(decay))
        with pytest.raises(ValueError, match="needs an optimizer with a float learning rate"):
            fit(model, [callback], rank)


def test_arguments_are_checked_in_the_callers_terms():
    with pytest.raises(ValueError, match=r"`initial_lr` must be a number > 0. Received: "
                                         r"initial_lr=0"):
        hvd_callbacks.LearningRateWarmupCallback(0)
    with pytest.raises(ValueError, match="`warmup_epochs`"):
        hvd_callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=-1)
    with pytest.raises(ValueError, match="`multiplier`"):
        hvd_callbacks.LearningRateScheduleCallback(0.1, "fast")
    with pytest.raises(ValueError, match="`end_epoch`"):
        hvd_callbacks.LearningRateScheduleCallback(0.1, 0.5, start_epoch=3, end_epoch=2)
    with pytest.raises(ValueError, match="`steps_per_epoch`"):
        hvd_callbacks.LearningRateScheduleCallback(0.1, 0.5, steps_per_epoch=0)
    with pytest.raises(ValueError, match="`root_rank`"):
        hvd_callbacks.BroadcastGlobalVariablesCallback("0")


# BestModelCheckpoint

def test_best_model_checkpoint_writes_on_rank_0_only(rank, size, shared_tmp_path):
    # One directory for all ranks (rank 0's), one file name per rank: only rank 0's may appear.
    directory = shared_tmp_path
    mine = os.path.join(directory, f"rank{rank}", "best.keras")
    model = make_model(seed=0)
    callback = hvd_callbacks.BestModelCheckpoint(mine, monitor="val_loss", verbose=0)
    assert callback.save_best_only
    fit(model, [hvd_callbacks.MetricAverageCallback(), callback], rank, epochs=2,
        validation_data=make_data(200, steps=1))
    tfring.allreduce(tf.constant(0), name="callbacks.checkpoint.barrier")  # all ranks fitted

    assert os.listdir(directory) == ["rank0"]
    assert os.listdir(os.path.join(directory, "rank0")) == ["best.keras"]
    if rank == 0:
        restored = keras.models.load_model(mine)
        assert restored.count_params() == model.count_params()
    tfring.allreduce(tf.constant(0), name="callbacks.checkpoint.barrier2")  # all ranks looked
    if rank == 0:
        shutil.rmtree(directory)


# XLA

def all_callbacks():
    return [hvd_callbacks.BroadcastGlobalVariablesCallback(0),
            hvd_callbacks.MetricAverageCallback(),
            hvd_callbacks.LearningRateWarmupCallback(LR, warmup_epochs=1),
            hvd_callbacks.LearningRateScheduleCallback(LR, 0.5),
            hvd_callbacks.BestModelCheckpoint("never-written.keras")]


def test_every_callback_turns_off_jit_compile_where_xla_cannot_run(monkeypatch):
    monkeypatch.setattr(tfring._ops.xla, "why_unavailable", lambda: "a test says so")
    for callback in all_callbacks():
        model = make_model(seed=0, jit_compile=True)
        assert model.jit_compile
        with pytest.warns(UserWarning, match=f"{type(callback).__name__}: .*jit_compile"):
            callback.set_model(model)
        assert model.jit_compile is False


def test_every_callback_leaves_jit_compile_on_where_xla_runs():
    assert tfring._ops.xla.available()
    for callback in all_callbacks():
        model = make_model(seed=0, jit_compile=True)
        callback.set_model(model)
        assert model.jit_compile is True


def test_fit_with_jit_compile_runs_without_xla_where_it_cannot_run(rank, size, monkeypatch):
    # Where tfring's ops cannot run under XLA, the callbacks turn jit_compile off before
    # Keras traces the step. The effect, not only the flag: the loss, traced inside the step,
    # notes whether TensorFlow is building an XLA cluster there (TensorFlow's own check);
    # the DistributedOptimizer would refuse to trace under XLA (tfring thinks it cannot run
    # there); and the fit trains as numpy's SGD on the ranks' batches together, with the
    # averaged loss.
    from tensorflow.python.ops import control_flow_util

    import tfring.keras as hvd_keras

    in_xla = []

    def mse(y_true, y_pred):
        in_xla.append(control_flow_util.GraphOrParentsInXlaContext(
            tf.compat.v1.get_default_graph()))
        return keras.losses.mean_squared_error(y_true, y_pred)

    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
    model.set_weights(initial_weights(rank))
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(LR)),
                  loss=mse, jit_compile=True)
    assert model.jit_compile  # compiled where XLA could run: the callbacks must turn it off
    # A train function built already (as by an earlier fit): it was made with XLA, and a
    # flag turned off afterwards alone would leave fit running it.
    model.make_train_function()
    monkeypatch.setattr(tfring._ops.xla, "why_unavailable", lambda: "a test says so")
    with pytest.warns(UserWarning, match="jit_compile"):
        history = fit(model, [hvd_callbacks.BroadcastGlobalVariablesCallback(0),
                              hvd_callbacks.MetricAverageCallback()], rank)
    assert model.jit_compile is False
    assert in_xla and not any(in_xla), in_xla  # traced, and never inside XLA
    w, b, loss = numpy_sgd(size)
    np.testing.assert_allclose(model.get_weights()[0], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[1], b, rtol=1e-5, atol=1e-6)
    assert history.history["loss"][0] == pytest.approx(loss, rel=1e-5)
