"""tf_keras (TF_USE_LEGACY_KERAS=1): tfring.keras.DistributedOptimizer hooks the optimizer's
gradient aggregation; model.fit on N ranks at batch B equals 1 process at batch N*B.

The suite runs this file in its own mpirun with TF_USE_LEGACY_KERAS=1 (tf.keras must be
tf_keras before TensorFlow is imported); in the Keras 3 runs it is skipped.
"""

import functools
import os

import numpy as np
import pytest
import tensorflow as tf

if not os.environ.get("TF_USE_LEGACY_KERAS") or "tf_keras" not in tf.keras.__name__:
    pytest.skip("tf_keras tests run with TF_USE_LEGACY_KERAS=1 (a stage of their own)",
                allow_module_level=True)

import tfring  # noqa: E402
import tfring.keras as hvd  # noqa: E402
import _keras_problem  # noqa: E402
import _uneven_fit  # noqa: E402
from _keras_problem import (BATCH, assert_same_on_all_ranks,  # noqa: E402
                            global_data, make_model, reference_weights, shard,
                            weights_and_optimizer_state)

keras = tf.keras
STEPS = 4


def fit_distributed(rank, size, optimizer, steps=STEPS, **kwargs):
    return _keras_problem.fit_distributed(keras, rank, size, optimizer, steps=steps, **kwargs)


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.SGD(0.1),
    lambda: keras.optimizers.Adam(0.01),
    lambda: keras.optimizers.legacy.SGD(0.05, momentum=0.9),
    lambda: keras.optimizers.legacy.Adam(0.01),
], ids=["sgd", "adam", "legacy-momentum", "legacy-adam"])
def test_fit_matches_one_process(rank, size, make_optimizer):
    model, opt = fit_distributed(rank, size, make_optimizer())
    assert type(opt).__module__.startswith("tf_keras")  # hooked in place, not wrapped
    assert int(opt.iterations) == STEPS
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "tf_keras")
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, make_optimizer(), STEPS, size))


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.Adam(0.01),
    lambda: keras.optimizers.legacy.Adam(0.01),
], ids=["adam", "legacy-adam"])
def test_accumulation_equals_a_larger_batch(rank, size, make_optimizer):
    # As Horovod on tf_keras: `iterations` counts every pass, so Adam's bias correction at
    # each update sees 2 * (updates so far); the reference advances its count to match.
    model, opt = fit_distributed(rank, size, make_optimizer(), passes=2,
                                 average_aggregated_gradients=True)
    assert int(opt.iterations) == 2 * STEPS
    assert int(opt._agg_helper.counter) == 0
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "tf_keras-accumulate")
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, make_optimizer(), STEPS, size, passes=2,
                                   count_passes=True))


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("aggregate_in_apply", [True, False], ids=["apply_reduces", "no_agg"])
@pytest.mark.parametrize("legacy", [False, True], ids=["optimizer", "legacy"])
def test_accumulation_counts_every_pass_as_horovod(rank, size, legacy, aggregate_in_apply,
                                                   average):
    # Horovod's own loop on tf_keras: _compute_gradients then apply_gradients in a
    # tf.function, 4 passes per update, 10 calls; "no_agg" passes apply_gradients the flag
    # that turns tf_keras's aggregation off, as Horovod's tests do. loss = x - (r + 1) y[0]
    # on rank r: dloss/dx = 1, dloss/dy = [-(r + 1), 0]. x is registered local: its gradient
    # is not reduced but divided by the size. Each update moves x by -lr * g / size and
    # y[0] by +lr * mean(r + 1) * g, with g the pass count N (or 1 when averaged).
    passes, calls, lr = 4, 10, 0.5
    make = keras.optimizers.legacy.SGD if legacy else keras.optimizers.SGD
    opt = hvd.DistributedOptimizer(make(lr), backward_passes_per_step=passes,
                                   average_aggregated_gradients=average)
    x, y = tf.Variable([0.0]), tf.Variable([1.0, 2.0])
    opt.register_local_var(x)
    flag = {} if aggregate_in_apply else (
        {"experimental_aggregate_gradients": False} if legacy else
        {"skip_gradients_aggregation": True})

    def loss():
        return x - float(rank + 1) * tf.gather(y, [0])

    @tf.function
    def step():
        opt.apply_gradients(opt._compute_gradients(loss, var_list=[x, y]), **flag)

    for call in range(calls):
        step()
        updates = (call + 1) // passes
        g = 1.0 if average else float(passes)
        np.testing.assert_allclose(x.numpy(), [-lr * g / size * updates])
        mean_scale = sum(r + 1 for r in range(size)) / size
        np.testing.assert_allclose(y.numpy(), [1.0 + lr * g * mean_scale * updates, 2.0])
        assert int(opt.iterations) == call + 1
    assert int(opt._agg_helper.counter) == calls % passes
    assert opt._agg_helper.backward_passes_per_step == passes


@pytest.mark.parametrize("passes", [1, 2])
def test_legacy_optimizer_in_a_tf1_graph_in_horovods_order(rank, size, passes):
    # A TF1 graph and session, as Horovod's TF1 scripts with a tf_keras optimizer: the
    # wrapper, minimize(), then the initializer. loss = sum(w * (r + 1)) on rank r, so every
    # pass's gradient is r + 1; an update applies lr times the passes' sum (Horovod's
    # default) of the ranks' mean. A graph runs only what the train op depends on: the
    # update, the sums' reset and the count of a pass that applies nothing must all hang
    # from it.
    lr, runs = 0.5, 4
    mean_grad = sum(r + 1 for r in range(size)) / size
    with tf.Graph().as_default():
        w = tf.Variable([1.0, -1.0])
        opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(lr),
                                       backward_passes_per_step=passes)
        train = opt.minimize(lambda: tf.reduce_sum(w * float(rank + 1)), var_list=[w])
        init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session() as session:
            session.run(init)
            for run in range(runs):
                session.run(train)
                updates = (run + 1) // passes
                np.testing.assert_allclose(
                    session.run(w), np.array([1.0, -1.0]) - lr * passes * mean_grad * updates)
                assert session.run(opt.iterations) == run + 1
                if passes > 1:
                    assert session.run(opt._agg_helper.counter) == (run + 1) % passes


@pytest.mark.parametrize("passes", [1, 2])
def test_sparse_embedding_both_paths(rank, size, passes):
    results = []
    for sparse_as_dense in (False, True):
        model, _ = fit_distributed(rank, size, keras.optimizers.SGD(0.1), passes=passes,
                                   embedding=True, sparse_as_dense=sparse_as_dense,
                                   average_aggregated_gradients=True)
        results.append([w.numpy() for w in model.weights])
    assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)
    assert_close(results[0], reference_weights(keras, keras.optimizers.SGD(0.1), STEPS, size,
                                               passes=passes, embedding=True))


@functools.lru_cache(maxsize=None)
def one_process_sgd(size):
    """One process, rank 0's starting weights (seed 1), SGD(0.1), the whole global batch per
    step: the weights and the epoch's mean loss that N ranks of SGD(0.1) must reproduce.
    With equal shards the global batch's loss is the mean of the ranks' losses, step by
    step, so MetricAverageCallback's average must equal this epoch loss."""
    assert keras.mixed_precision.global_policy().name == "float32"  # cached: full precision
    model = make_model(keras, seed=1)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, _, y = global_data(STEPS, size)
    history = model.fit(x, y, batch_size=size * BATCH, epochs=1, shuffle=False, verbose=0)
    return [w.numpy() for w in model.weights], history.history["loss"][0]


def test_mixed_precision_skips_the_same_steps_everywhere(rank, size):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        opt = hvd.DistributedOptimizer(keras.mixed_precision.LossScaleOptimizer(
            keras.optimizers.SGD(0.1), dynamic=True, initial_scale=4.0))
        model = make_model(keras, seed=1 if rank == 0 else 9)
        model.compile(optimizer=opt, loss="mse")
        data = global_data(STEPS, size)
        x, _, y = shard(data, rank, size)
        if rank == size - 1:
            x = x.copy()
            x[:BATCH] *= 1e6  # float16 overflows on this rank only, in the first step
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        state = weights_and_optimizer_state(model)
        assert_same_on_all_ranks(state, "tf_keras-mixed")
        # tf_keras counts skipped steps in iterations; the halved scale shows the skip.
        assert float(opt.loss_scale) == 2.0
        assert all(np.all(np.isfinite(a)) for a in state)

        # One process in mixed precision from rank 0's weights that skips the first step and
        # applies the other three on the global batch (at the scale 2.0 the skip left): the
        # weights every rank must have. float16 sums a rank's 4 rows and the global batch's
        # 4N rows differently: a few float16 roundings apart, far less than a step moves.
        reference = make_model(keras, seed=1)
        reference.compile(optimizer=keras.mixed_precision.LossScaleOptimizer(
            keras.optimizers.SGD(0.1), dynamic=True, initial_scale=2.0), loss="mse")
        rows = slice(size * BATCH, None)
        reference.fit(data[0][rows], data[2][rows], batch_size=size * BATCH, epochs=1,
                      shuffle=False, verbose=0)
        assert float(reference.optimizer.loss_scale) == 2.0  # it skipped nothing
        assert_close([w.numpy() for w in model.weights],
                     [w.numpy() for w in reference.weights], rtol=1e-3, atol=3e-4)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_load_model_hooks_the_loaded_optimizer(rank, size, shared_tmp_path):
    path = os.path.join(shared_tmp_path, "model.keras")
    if rank == 0:
        model = make_model(keras, seed=1)
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                      loss="mse")
        model.save(path)
    tfring.allreduce(tf.constant(0), name="tfk.saved")
    restored = hvd.load_model(path)
    assert hvd.optimizer.is_distributed(restored.optimizer)
    x, _, y = shard(global_data(STEPS, size), rank, size)
    restored.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                 callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert_same_on_all_ranks([w.numpy() for w in restored.weights], "tfk-loaded")
    # The loaded optimizer averages gradients: one process's SGD on the global batch, from
    # the saved weights (seed 1). Unhooked, each rank would follow its own shard.
    assert_close([w.numpy() for w in restored.weights], one_process_sgd(size)[0])


def test_metric_average_callback(rank, size):
    model = make_model(keras, seed=1)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, _, y = shard(global_data(STEPS, size), rank, size)
    history = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    loss = history.history["loss"][0]
    # Each rank's own epoch loss is that of its shard; averaged, it is the mean over the
    # ranks, which the one-process fit on the global batch computes without tfring.
    want_weights, want_loss = one_process_sgd(size)
    assert_close([w.numpy() for w in model.weights], want_weights)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    every_rank = tfring.allgather_object(loss, name="tfk.losses")
    assert all(v == pytest.approx(every_rank[0], rel=1e-6) for v in every_rank)


def test_fit_with_uneven_batches(rank, size):
    _uneven_fit.check_fit_with_uneven_batches(keras, rank, size)


def test_sync_batch_normalization_uses_the_global_batch(rank, size):
    # The tf_keras layer (Horovod's base class) with Horovod's fused=False; uneven batches.
    def batch(r):
        return (np.random.default_rng(40 + r).normal(size=(r + 2, 3)) * (r + 1) + 5.0
                ).astype(np.float32)

    layer = tfring.SyncBatchNormalization(fused=False, momentum=0.5, epsilon=1e-3)
    assert isinstance(layer, keras.layers.BatchNormalization)
    out = layer(tf.constant(batch(rank)), training=True).numpy()
    everything = np.concatenate([batch(r) for r in range(size)]).astype(np.float64)
    start = sum(r + 2 for r in range(rank))
    want = (everything[start:start + rank + 2] - everything.mean(0)) / \
        np.sqrt(everything.var(0) + 1e-3)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.5 * everything.mean(0), rtol=1e-5)


def test_register_local_var_on_a_tf_keras_optimizer(rank, size):
    w, v = tf.Variable([0.0]), tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0))
    opt.register_local_var(w)  # Horovod's: w's gradient stays local (divided by size)
    g = tf.constant([float(rank + 1)])
    opt.apply_gradients([(g, w), (g, v)])
    np.testing.assert_allclose(w.numpy(), [-(rank + 1) / size])
    np.testing.assert_allclose(v.numpy(), [-np.mean(np.arange(1, size + 1))])


@pytest.mark.parametrize("legacy", [False, True], ids=["optimizers", "legacy"])
def test_horovod_optimizer_hooks_compute_and_aggregate(legacy, rank, size):
    # Horovod scripts on tf_keras call these private hooks: _compute_gradients with a tape
    # returns reduced gradients, which apply_gradients then applies without reducing again.
    sgd = keras.optimizers.legacy.SGD if legacy else keras.optimizers.SGD
    w = tf.Variable([1.0])
    opt = hvd.DistributedOptimizer(sgd(1.0))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(rank + 1))
    pairs = opt._compute_gradients(loss, [w], tape=tape)
    mean = np.mean(np.arange(1, size + 1))
    np.testing.assert_allclose(pairs[0][0].numpy(), [mean])
    opt.apply_gradients(pairs)
    np.testing.assert_allclose(w.numpy(), [1.0 - mean])
    again = opt._aggregate_gradients([(tf.constant([float(rank)]), w)])
    np.testing.assert_allclose(again[0][0].numpy(), [np.mean(np.arange(size))])


@pytest.mark.parametrize("legacy", [False, True], ids=["optimizers", "legacy"])
def test_adasum_applies_the_adasum_of_the_gradients(legacy, rank, size):
    # Rank r's gradient is [r+1, 1]; Adasum of two ranks' a and b is
    # (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b.
    if size != 2:
        pytest.skip("worked for 2 ranks")
    sgd = keras.optimizers.legacy.SGD if legacy else keras.optimizers.SGD
    w = tf.Variable([0.0, 0.0])
    opt = hvd.DistributedOptimizer(sgd(1.0), op=tfring.Adasum)
    grad = tf.constant([float(rank + 1), 1.0])
    opt.apply_gradients([(grad, w)])
    a, b = np.array([1.0, 1.0]), np.array([2.0, 1.0])
    dot = a @ b
    want = (1 - dot / (2 * a @ a)) * a + (1 - dot / (2 * b @ b)) * b
    np.testing.assert_allclose(w.numpy(), -want, rtol=1e-6)


def test_tensorflow_module_optimizer_hooks_tf_keras_optimizers(rank, size):
    # hvd.DistributedOptimizer (horovod.tensorflow) given a tf_keras optimizer: the Keras path.
    w = tf.Variable([0.0])
    opt = tfring.DistributedOptimizer(keras.optimizers.SGD(1.0))
    opt.apply_gradients([(tf.constant([float(rank)]), w)])
    np.testing.assert_allclose(w.numpy(), [-np.mean(np.arange(size))])


def test_fit_with_jit_compile_keeps_xla(rank, size):
    # tf_keras compiles the step with XLA too; the hooked aggregation runs inside it.
    model, opt = fit_distributed(rank, size, keras.optimizers.Adam(0.01), jit_compile=True)
    assert model._jit_compile is True
    assert int(opt.iterations) == STEPS
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "tf_keras xla")
    assert_close([w.numpy() for w in model.weights],
                 reference_weights(keras, keras.optimizers.Adam(0.01), STEPS, size))


def test_aggregation_helper_counts_every_pass_of_a_tf_keras_optimizer(rank, size):
    # Horovod's LocalGradientAggregationHelper on a tf_keras optimizer: the passes that apply
    # nothing still add 1 to `iterations`; the update steps apply (and count) once.
    from tfring import LocalGradientAggregationHelper as Helper
    opt = keras.optimizers.SGD(0.5)
    w = tf.Variable([0.0])
    helper = Helper(backward_passes_per_step=3, sparse_as_dense=False,
                    allreduce_func=lambda g, v: tfring.grouped_allreduce(g, op=tfring.Average),
                    average_aggregated_gradients=False, rank=rank,
                    optimizer_type=Helper._OPTIMIZER_TYPE_KERAS)

    @tf.function
    def step():
        grads = helper.compute_gradients([tf.constant([1.0])], [w])
        return helper.apply_gradients(lambda: opt.apply_gradients(zip(grads, [w])), opt)

    for call in range(7):
        step()
        assert int(opt.iterations) == call + 1
        np.testing.assert_allclose(w.numpy(), [-0.5 * 3.0 * ((call + 1) // 3)])


def test_keras_elastic_sync_gives_a_joiner_the_optimizer_state(rank):
    from _elastic_fit import check_sync_gives_a_joiner_the_optimizer_state

    check_sync_gives_a_joiner_the_optimizer_state(hvd, rank)


def test_keras_elastic_callbacks_commit_and_count_in_fit(rank, size):
    from _elastic_fit import check_elastic_callbacks

    check_elastic_callbacks(hvd, rank, size)
