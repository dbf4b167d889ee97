"""tfring.keras.callbacks under tf_keras (TF_USE_LEGACY_KERAS=1): the learning-rate
callbacks, momentum correction and BestModelCheckpoint, with tf_keras's optimizers (the
new ones and tf_keras.optimizers.legacy). test_keras_callbacks.py tests them with Keras 3.

Expected values come from Horovod's formulas (horovod/_keras/callbacks.py) and numpy, from
quantities every rank knows (seeds, sizes), never from the code under test. The suite runs
this file in its tf_keras stage (TF_USE_LEGACY_KERAS=1 set before TensorFlow is imported);
in the Keras 3 runs it is skipped, on every rank alike.
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

if os.environ.get("TF_USE_LEGACY_KERAS") != "1" or "tf_keras" not in tf.keras.__name__:
    pytest.skip("tf_keras tests run with TF_USE_LEGACY_KERAS=1 (a stage of their own)",
                allow_module_level=True)

import tfring  # noqa: E402
import tfring.keras as hvd  # noqa: E402

keras = tf.keras
FEATURES = 3
BATCH = 4
STEPS = 4  # batches per epoch
LR = 0.2

OPTIMIZERS = {
    "sgd": lambda lr, **kw: keras.optimizers.SGD(lr, **kw),
    "legacy-sgd": lambda lr, **kw: keras.optimizers.legacy.SGD(lr, **kw),
}


def make_data(seed, steps=STEPS):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * BATCH, FEATURES)).astype(np.float32)
    y = rng.normal(size=(steps * BATCH, 1)).astype(np.float32)
    return x, y


def initial_weights(seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(FEATURES, 1)).astype(np.float32),
            rng.normal(size=(1,)).astype(np.float32)]


def make_model(optimizer, seed=0):
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
    model.set_weights(initial_weights(seed))
    model.compile(optimizer=optimizer, loss="mse")
    return model


def fit(model, callbacks, rank, epochs=1, steps=STEPS):
    x, y = make_data(100 + rank, steps)
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=callbacks)


def learning_rate(model):
    # tf_keras's optimizers hold a variable; the legacy ones may hold a float before their
    # first step creates their hyperparameter variables.
    return float(np.asarray(keras.backend.get_value(model.optimizer.learning_rate)))


class Recorder(keras.callbacks.Callback):
    """Keeps `fn()` at each batch's beginning, keyed (epoch, batch)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.records = {}
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.records[(self.epoch, batch)] = self.fn()


# LearningRateWarmupCallback

def horovod_warmup_lr(initial_lr, size, warmup_epochs, epoch, batch):
    # Horovod: multiplier(epoch + batch / steps) with epoch += 1 / steps inside, so batch b
    # of epoch e runs at e + (b + 1) / steps.
    epoch_f = epoch + (batch + 1) / STEPS
    return initial_lr / size * (epoch_f * (size - 1) / warmup_epochs + 1)


@pytest.mark.parametrize("kind", list(OPTIMIZERS))
def test_warmup_sets_horovods_rate_at_each_batch(kind, rank, size, capsys):
    initial_lr = 0.1 * size
    model = make_model(OPTIMIZERS[kind](0.5))
    seen = Recorder(lambda: learning_rate(model))
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr, warmup_epochs=2, verbose=1)
    history = fit(model, [warmup, seen], rank, epochs=3)

    assert len(seen.records) == 3 * STEPS
    for (epoch, batch), got in seen.records.items():
        want = horovod_warmup_lr(initial_lr, size, 2, epoch, batch) if epoch < 2 else initial_lr
        assert got == pytest.approx(want, rel=1e-6), (epoch, batch)
    # The first batch is one batch above the single-process rate, initial_lr / size.
    assert seen.records[(0, 0)] == pytest.approx(
        initial_lr / size * (1 + (size - 1) / (2 * STEPS)), rel=1e-6)
    assert learning_rate(model) == pytest.approx(initial_lr, rel=1e-6)
    # Logged at each epoch's end (Horovod's key "lr"): each warmup epoch ends on a round
    # number of epochs, the last at initial_lr.
    np.testing.assert_allclose(history.history["lr"],
                               [initial_lr / size * (1 + (size - 1) / 2), initial_lr,
                                initial_lr], rtol=1e-6)
    printed = capsys.readouterr().out
    assert ("finished gradual learning rate warmup" in printed) == (rank == 0)


# LearningRateScheduleCallback

@pytest.mark.parametrize("kind, staircase", [("legacy-sgd", True), ("sgd", False)])
def test_schedule_sets_initial_lr_times_the_multiplier(kind, staircase, rank, size):
    model = make_model(OPTIMIZERS[kind](0.3))
    seen = Recorder(lambda: learning_rate(model))
    multiplier = (lambda epoch: 0.5 ** epoch) if staircase else (lambda epoch: 1 / (1 + epoch))
    schedule = hvd.callbacks.LearningRateScheduleCallback(
        0.4, multiplier, start_epoch=1, end_epoch=3, staircase=staircase)
    history = fit(model, [schedule, seen], rank, epochs=4)

    def want(epoch, batch):
        if epoch < 1:
            return 0.3  # untouched before start_epoch
        last = min(epoch, 2)  # and after end_epoch (exclusive) it keeps the last rate
        if staircase:  # Horovod: at the first batch of each epoch, from the integer epoch
            return 0.4 * multiplier(last)
        # at every batch, from the fractional epoch epoch + batch / steps
        fractional = epoch + batch / STEPS if epoch < 3 else 2 + (STEPS - 1) / STEPS
        return 0.4 * multiplier(fractional)

    assert len(seen.records) == 4 * STEPS
    for (epoch, batch), got in seen.records.items():
        assert got == pytest.approx(want(epoch, batch), rel=1e-6), (epoch, batch)
    np.testing.assert_allclose(history.history["lr"],
                               [want(e, STEPS - 1) for e in range(4)], rtol=1e-6)


# Momentum correction

def momentum_buffers(model):
    optimizer = model.optimizer
    if hasattr(optimizer, "get_slot"):  # legacy: a "momentum" slot per variable
        try:
            return [optimizer.get_slot(v, "momentum").numpy()
                    for v in model.trainable_variables]
        except (KeyError, ValueError):  # slots are created in the first step
            return None
    momentums = getattr(optimizer, "momentums", None)
    return [m.numpy() for m in momentums] if momentums else None


def horovod_momentum_sgd(size, lrs, optimizer_lr, momentum, correction):
    """One process's momentum SGD from rank 0's weights on every rank's batch together (what
    the averaged gradients of equal batches give), with Horovod's momentum correction: for a
    batch whose rate a callback changed from old to new, Keras's velocity step
    v = momentum * v - lr * g runs with momentum * new / old."""
    w, b = (a.astype(np.float64) for a in initial_weights(0))
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    data = [make_data(100 + r) for r in range(size)]
    old = optimizer_lr
    for step, lr in enumerate(lrs):
        rows = slice((step % STEPS) * BATCH, (step % STEPS + 1) * BATCH)
        x = np.concatenate([d[0][rows] for d in data]).astype(np.float64)
        y = np.concatenate([d[1][rows] for d in data]).astype(np.float64)
        error = x @ w + b - y
        gw, gb = 2 * x.T @ error / len(x), 2 * error.sum(0) / len(x)
        m = momentum * lr / old if correction else momentum
        vw, vb = m * vw - lr * gw, m * vb - lr * gb
        w, b = w + vw, b + vb
        old = lr
    return w, b


@pytest.mark.parametrize("kind, correction", [("sgd", True), ("legacy-sgd", True),
                                              ("legacy-sgd", False)])
def test_momentum_correction_gives_horovods_training(kind, correction, rank, size):
    # The rate changes at every batch (staircase=False), each change scales the velocity
    # by new / old, and the fit's weights are those of Horovod's correction, in numpy.
    model = make_model(hvd.DistributedOptimizer(OPTIMIZERS[kind](0.3, momentum=0.9)))
    state = lambda: (learning_rate(model), momentum_buffers(model))
    before, after = Recorder(state), Recorder(state)
    schedule = hvd.callbacks.LearningRateScheduleCallback(
        0.05, lambda epoch: 1.0 + epoch, staircase=False, momentum_correction=correction)
    fit(model, [before, schedule, after], rank, epochs=2)

    lrs = [0.05 * (1.0 + epoch + batch / STEPS) for epoch in range(2) for batch in range(STEPS)]
    rescaled = 0
    for (epoch, batch), (old_lr, old_m) in before.records.items():
        new_lr, new_m = after.records[(epoch, batch)]
        assert new_lr == pytest.approx(lrs[epoch * STEPS + batch], rel=1e-6)
        if old_m is None:  # before the first step there is no velocity yet
            assert (epoch, batch) == (0, 0) and new_m is None
            continue
        factor = new_lr / old_lr if correction else 1.0
        for got, m in zip(new_m, old_m):
            np.testing.assert_allclose(got, m * np.float32(factor), rtol=1e-6, atol=0)
        rescaled += bool(np.any(old_m[0] != 0))
    assert rescaled == 2 * STEPS - 1  # every later batch compared a nonzero velocity

    want_w, want_b = horovod_momentum_sgd(size, lrs, 0.3, 0.9, correction)
    np.testing.assert_allclose(model.get_weights()[0], want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[1], want_b, rtol=1e-5, atol=1e-6)
    if correction:  # the correction really changed the result
        plain_w, _ = horovod_momentum_sgd(size, lrs, 0.3, 0.9, False)
        assert np.max(np.abs(plain_w - want_w)) > 1e-3


# BestModelCheckpoint

SCORES = [3.0, 2.0, 2.5, 1.0]  # the mean over ranks; "min": improves at epochs 1, 2 and 4
RANK_0_SCORES = [3.0, 2.0, 1.9, 1.0]  # rank 0's own: improves at every epoch


class InjectScore(keras.callbacks.Callback):
    """Logs a rank-specific "score" whose mean over the ranks is SCORES."""

    def __init__(self, rank, size):
        super().__init__()
        self.rank, self.size = rank, size

    def on_epoch_end(self, epoch, logs=None):
        offset = RANK_0_SCORES[epoch] - SCORES[epoch] if self.size > 1 else 0.0
        logs["score"] = SCORES[epoch] + offset if self.rank == 0 else \
            SCORES[epoch] - offset / (self.size - 1)


class EpochEndWeights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights())


def test_best_model_checkpoint_writes_on_rank_0_when_the_average_improves(
        rank, size, shared_tmp_path):
    # One directory for every rank (rank 0's), a name per rank: only rank 0's may appear,
    # and only for the epochs (1-based in the name) whose averaged score improved.
    directory = shared_tmp_path
    mine = os.path.join(directory, f"rank{rank}", "best-{epoch}.keras")
    model = make_model(keras.optimizers.SGD(LR), seed=0)
    weights = EpochEndWeights()
    checkpoint = hvd.callbacks.BestModelCheckpoint(mine, monitor="score", mode="min")
    assert checkpoint.save_best_only
    fit(model, [InjectScore(rank, size), hvd.callbacks.MetricAverageCallback(), weights,
                checkpoint], rank, epochs=len(SCORES), steps=1)
    tfring.barrier()  # every rank has fitted

    assert os.listdir(directory) == ["rank0"]
    assert sorted(os.listdir(os.path.join(directory, "rank0"))) == \
        ["best-1.keras", "best-2.keras", "best-4.keras"]
    if rank == 0:
        # What was saved is the model at that epoch's end.
        for epoch in (2, 4):
            restored = keras.models.load_model(mine.format(epoch=epoch))
            for got, want in zip(restored.get_weights(), weights.weights[epoch - 1]):
                np.testing.assert_array_equal(got, want)
        assert checkpoint.best == pytest.approx(1.0)
    tfring.barrier()  # every rank has looked
    if rank == 0:
        shutil.rmtree(directory)
