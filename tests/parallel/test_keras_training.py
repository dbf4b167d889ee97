"""Keras 3 model.fit with tfring.keras.DistributedOptimizer: N ranks at batch B train exactly
like 1 process at batch N*B, every rank ends bitwise identical, accumulation counts applied
steps, sparse gradients, mixed precision, XLA, and save / rank-0 checkpoint / resume."""

import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd
import _keras_problem
from _keras_problem import (BATCH, assert_same_on_all_ranks, global_data, make_model,
                            reference_weights, shard, weights_and_optimizer_state)

STEPS = 4

if keras.__version__.startswith("2."):
    pytest.skip("these tests are for Keras 3 (tf_keras has test_tf_keras.py)",
                allow_module_level=True)


def fit_distributed(rank, size, optimizer, steps=STEPS, **kwargs):
    return _keras_problem.fit_distributed(keras, rank, size, optimizer, steps=steps, **kwargs)


def assert_close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.SGD(0.1),
    lambda: keras.optimizers.SGD(0.05, momentum=0.9),
    lambda: keras.optimizers.Adam(0.01),
], ids=["sgd", "momentum", "adam"])
def test_fit_matches_one_process_on_the_global_batch(rank, size, make_optimizer):
    model, opt = fit_distributed(rank, size, make_optimizer())
    assert isinstance(opt, hvd.DistributedKerasOptimizer)
    assert int(opt.iterations) == STEPS
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "fit")
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, make_optimizer(), STEPS, size), rtol=1e-4, atol=1e-5)


def test_tensorflow_module_optimizer_takes_keras_optimizers(rank, size):
    # Scripts written against horovod.tensorflow wrap Keras optimizers with
    # hvd.DistributedOptimizer: as in Horovod, they get the Keras wrapper.
    model, opt = fit_distributed(rank, size, keras.optimizers.SGD(0.1),
                                 wrap=tfring.DistributedOptimizer)
    assert isinstance(opt, hvd.DistributedKerasOptimizer)
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, keras.optimizers.SGD(0.1), STEPS, size),
                 rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="needs a TF1 optimizer .* or a Keras optimizer"):
        tfring.DistributedOptimizer(object())


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.SGD(0.1),
    lambda: keras.optimizers.Adam(0.01),
], ids=["sgd", "adam"])
def test_accumulation_equals_a_passes_times_larger_batch(rank, size, make_optimizer):
    # 2 passes per step, averaged: the same as one process at batch size * 2 * BATCH; Adam's
    # bias correction only matches if iterations count applied steps.
    model, opt = fit_distributed(rank, size, make_optimizer(), passes=2,
                                 average_aggregated_gradients=True)
    assert int(opt.iterations) == STEPS
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "accumulate")
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, make_optimizer(), STEPS, size, passes=2),
                 rtol=1e-4, atol=1e-5)


def test_accumulation_without_averaging_applies_the_sum(rank, size):
    # average_aggregated_gradients=False (Horovod's default) applies the sum of 2 passes:
    # with SGD that is a learning rate twice as large on the averaged batch.
    model, _ = fit_distributed(rank, size, keras.optimizers.SGD(0.05), passes=2)
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, keras.optimizers.SGD(0.1), STEPS, size, passes=2),
                 rtol=1e-4, atol=1e-5)


def test_keras_own_gradient_accumulation_steps(rank, size):
    # The inner optimizer accumulates the reduced gradients itself and averages them.
    model, _ = fit_distributed(rank, size,
                               keras.optimizers.SGD(0.1, gradient_accumulation_steps=2))
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "keras-accumulation")
    # 4 micro-steps of size*BATCH = 2 applied steps on a batch twice as large.
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, keras.optimizers.SGD(0.1), STEPS // 2, size, passes=2),
                 rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("passes", [1, 2])
def test_sparse_embedding_both_paths_agree(rank, size, passes):
    results = []
    for sparse_as_dense in (False, True):
        model, _ = fit_distributed(rank, size, keras.optimizers.SGD(0.1), passes=passes,
                                   embedding=True, sparse_as_dense=sparse_as_dense,
                                   average_aggregated_gradients=True)
        assert_same_on_all_ranks([w.numpy() for w in model.weights], "sparse")
        results.append([w.numpy() for w in model.weights])
    assert_close(results[0], results[1])
    assert_close(results[0], reference_weights(keras, keras.optimizers.SGD(0.1), STEPS, size,
                                               passes=passes, embedding=True),
                 rtol=1e-4, atol=1e-5)


def test_sparse_gradient_reaches_the_optimizer_gathered(rank, size):
    # Without sparse_as_dense the embedding's tf.IndexedSlices gradient is allgathered.
    seen = []

    class Spy(keras.optimizers.SGD):
        def apply(self, grads, trainable_variables=None):
            seen.extend(type(g).__name__ for g in grads)
            return super().apply(grads, trainable_variables)

    fit_distributed(rank, size, Spy(0.1), embedding=True, steps=1)
    assert "IndexedSlices" in seen


def fp16_problem(rank):
    """Rank r's batch for one step of a Dense(1) layer from zero weights, chosen so that
    float32 computes its gradient exactly and float16 exactly drops a known part of it.

    From zero weights the error is -y, so the MSE gradient is -(2/BATCH) x^T y for the kernel
    and -(2/BATCH) sum(y) for the bias. x holds 1s and 2s; y = c + 2**-16 with c a multiple
    of 1/4 in [1/4, 2]. Each gradient is then g = a - t: a, from the c's, a multiple of 1/8
    of magnitude 1/2 to 8 (8 significant bits: float16 holds it, and any sum of a few); t,
    from the 2**-16's, at most 2**-14, less than half a float16 step at |a| >= 1/2, so
    float16(g) = a. float32 holds g (under 24 significant bits) and computes it exactly."""
    rng = np.random.default_rng(300 + rank)
    x = rng.integers(1, 3, size=(BATCH, 3)).astype(np.float32)
    y = (rng.integers(1, 9, size=(BATCH, 1)) / 4 + 2.0 ** -16).astype(np.float32)
    return x, y


def test_fp16_compression_sends_float16_in_fit(rank, size):
    # One step of fit with Compression.fp16, checked exactly against numpy: every rank's
    # float32 gradient, rounded to float16, averaged (the sums are exact in float16; the
    # mean is rounded to float16 once, as the wire's dtype holds it), applied by SGD(0.5).
    # Without the compression the mean would keep the 2**-16 parts (fp16_problem) and
    # differ from this in every element.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.5),
                                                     compression=hvd.Compression.fp16),
                  loss="mse")
    x, y = fp16_problem(rank)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)

    sums, exact_sums = [np.zeros((3, 1)), np.zeros(1)], [np.zeros((3, 1)), np.zeros(1)]
    for r in range(size):
        rx, ry = (a.astype(np.float64) for a in fp16_problem(r))
        grads = [-(2 / BATCH) * rx.T @ ry, -(2 / BATCH) * ry.sum(0)]
        for total, exact, g in zip(sums, exact_sums, grads):
            assert np.all(g.astype(np.float32) == g)  # float32 holds every rank's gradient
            assert np.all(g.astype(np.float16) != g)  # and float16 rounds every one of them
            total += g.astype(np.float16)
            exact += g
    for total, exact, got in zip(sums, exact_sums, model.get_weights()):
        assert np.all(total.astype(np.float16) == total)  # the sums are exact in float16
        mean = (total / size).astype(np.float16).astype(np.float32)
        assert np.all((exact / size).astype(np.float32) != mean)  # what no compression gives
        np.testing.assert_array_equal(got, np.float32(-0.5) * mean)


def test_mixed_precision_reduces_before_the_finite_check(rank, size):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
        assert isinstance(opt, hvd.DistributedLossScaleOptimizer)
        model = make_model(keras, seed=1 if rank == 0 else 9)
        model.compile(optimizer=opt, loss="mse")
        assert model.optimizer is opt  # Keras did not wrap it in a second LossScaleOptimizer

        # The last rank's first batch overflows float16 there only: every rank must skip
        # that step (and halve its loss scale) and apply the others: no hang, no divergence.
        opt = hvd.DistributedOptimizer(
            keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=1.0))
        model = make_model(keras, seed=1 if rank == 0 else 9)
        model.compile(optimizer=opt, loss="mse")
        x, y = shard(global_data(STEPS, size), rank, size)[0::2]
        if rank == size - 1:
            x = x.copy()
            x[:BATCH] *= 1e6
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        state = weights_and_optimizer_state(model)
        assert_same_on_all_ranks(state, "mixed")
        assert int(opt.iterations) == STEPS - 1
        assert float(opt.dynamic_scale) == 0.5
        assert all(np.all(np.isfinite(a)) for a in state)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_loss_scale_optimizer_given_by_the_user(rank, size):
    inner = keras.optimizers.SGD(0.1)
    opt = hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(inner, initial_scale=64.0))
    assert isinstance(opt, hvd.DistributedLossScaleOptimizer)
    assert opt.inner_optimizer is inner and opt.initial_scale == 64.0
    model, _ = fit_distributed(rank, size, keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=64.0))
    # Loss scaling by a power of two and back is exact: same as plain SGD on the global batch.
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, keras.optimizers.SGD(0.1), STEPS, size),
                 rtol=1e-4, atol=1e-5)


def test_jit_compile_true_fits_without_xla_where_the_lowering_cannot_run(rank, size,
                                                                          monkeypatch):
    # A build without the XLA lowerings (or a visible GPU, for now): XLA goes off for the
    # step, with a warning that says why. test_xla.py has the fits that keep XLA.
    monkeypatch.setattr(tfring._ops.xla, "why_unavailable", lambda: "a test says so")
    model = make_model(keras, seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                      loss="mse", jit_compile=True)
    assert model.jit_compile is False
    assert any("a test says so" in str(w.message) for w in caught)
    x, y = shard(global_data(STEPS, size), rank, size)[0::2]
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, keras.optimizers.SGD(0.1), STEPS, size),
                 rtol=1e-4, atol=1e-5)


def test_learning_rate_and_iterations_are_the_inner_optimizers(rank, size):
    inner = keras.optimizers.SGD(0.1)
    opt = hvd.DistributedOptimizer(inner)
    opt.learning_rate = 0.5
    assert float(inner.learning_rate) == pytest.approx(0.5)
    assert float(opt.learning_rate) == pytest.approx(0.5)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    model, opt = fit_distributed(rank, size, keras.optimizers.SGD(schedule), passes=2)
    # The schedule sees applied steps: 4 of them, so 0.1 * 0.5**4.
    assert int(opt.iterations) == STEPS
    assert float(opt.learning_rate) == pytest.approx(0.1 * 0.5 ** STEPS)


def test_options_are_checked(rank, size):
    with pytest.raises(ValueError, match="op must be"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Max)
    with pytest.raises(ValueError, match="backward_passes_per_step must be >= 1"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="already a tfring DistributedOptimizer"):
        hvd.DistributedOptimizer(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)))
    with pytest.raises(TypeError, match="needs a Keras optimizer"):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))


@pytest.mark.parametrize("passes", [1, 2])
def test_rank0_checkpoint_then_resume(rank, size, passes, shared_tmp_path):
    # Train half the steps, rank 0 alone saves; every rank reloads with load_model and trains
    # the rest: the result equals uninterrupted training, identical on every rank.
    path = os.path.join(shared_tmp_path, "model.keras")
    x, _, y = shard(global_data(STEPS, size, passes), rank, size)
    model = make_model(keras, seed=1 if rank == 0 else 70 + rank)
    model.compile(optimizer=hvd.DistributedOptimizer(
        keras.optimizers.Adam(0.01), backward_passes_per_step=passes,
        average_aggregated_gradients=True), loss="mse")
    cut = len(x) // 2  # a window boundary when accumulating
    model.fit(x[:cut], y[:cut], batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    if rank == 0:
        model.save(path)
    tfring.allreduce(tf.constant(0), name=f"saved.{passes}")  # a barrier

    restored = hvd.load_model(path)
    opt = restored.optimizer
    assert isinstance(opt, hvd.DistributedKerasOptimizer)
    assert opt.backward_passes_per_step == passes
    assert int(opt.iterations) == STEPS // 2
    restored.fit(x[cut:], y[cut:], batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                 callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert int(opt.iterations) == STEPS
    assert_same_on_all_ranks(weights_and_optimizer_state(restored), "resume")
    assert_close([w.numpy() for w in restored.weights],
                 reference_weights(keras, keras.optimizers.Adam(0.01), STEPS, size, passes),
                 rtol=1e-4, atol=1e-5)


def test_load_model_wraps_a_plain_optimizer(rank, size, shared_tmp_path):
    path = os.path.join(shared_tmp_path, "plain.keras")
    if rank == 0:
        model = make_model(keras, seed=3)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        model.save(path)
    tfring.allreduce(tf.constant(0), name="plain.saved")
    restored = hvd.load_model(path, compression=hvd.Compression.fp16)
    assert isinstance(restored.optimizer, hvd.DistributedKerasOptimizer)
    assert restored.optimizer.get_config()["compression"] == "fp16"
