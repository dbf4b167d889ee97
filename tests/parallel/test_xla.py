"""tfring's collectives inside functions that XLA compiles (jit_compile=True).

Every collective that has an XLA lowering is also in the XLA run mode of test_allreduce.py
and test_allgather_broadcast.py (every dtype and reduce op against numpy); this file checks
what is particular to XLA: the ops are really compiled (a custom call in the HLO), results
equal the eager ones bitwise, gradients, errors that name the op or the tensor on every
rank, and Keras fits that keep jit_compile=True.
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd
import _keras_problem
from _keras_problem import (BATCH, assert_same_on_all_ranks, make_model, reference_weights,
                            weights_and_optimizer_state)
from _util import rank_input

STEPS = 4
SHAPES = [(3, 5), (7,), (), (2, 0), (64, 33)]


def mine(rank, shape, seed=0):
    return np.random.default_rng(10 * rank + seed).normal(size=shape).astype(np.float32)


def test_the_collectives_are_compiled_into_the_hlo(rank, size):
    @tf.function(jit_compile=True)
    def step(x):
        return tfring.grouped_allreduce([x, 2 * x]), tfring.broadcast(x, 0), tfring.size_op()

    x = tf.constant(mine(rank, (4,)))
    hlo = step.experimental_get_compiler_ir(x)(stage="hlo")
    assert hlo.count('custom_call_target="tfring_collective"') == 2
    # size_op is folded into the HLO as a constant holding the job's size, not a call.
    assert re.search(rf"%TfringSize\.\d+ = s32\[\] constant\({size}\)", hlo), hlo
    grouped, broadcast, set_size = step(x)
    assert int(set_size) == size
    np.testing.assert_array_equal(broadcast, mine(0, (4,)))
    np.testing.assert_allclose(grouped[1], 2 * sum(mine(r, (4,)) for r in range(size)) / size,
                               rtol=1e-6)


@pytest.mark.parametrize("op", [tfring.Sum, tfring.Average, tfring.Max],
                         ids=["sum", "average", "max"])
def test_grouped_results_equal_the_eager_ones_bitwise(op, rank, size):
    # The same tensors in the same grouped op take the same fused reduction eagerly and
    # under XLA: the results must be identical, not just close.
    tensors = [tf.constant(mine(rank, shape, seed=i)) for i, shape in enumerate(SHAPES)]
    eager = tfring.grouped_allreduce(tensors, op=op, name="bitwise")
    compiled = tf.function(
        lambda ts: tfring.grouped_allreduce(ts, op=op, name="bitwise"), jit_compile=True)(
            tensors)
    for e, c in zip(eager, compiled):
        assert e.shape == c.shape
        np.testing.assert_array_equal(c.numpy(), e.numpy())


def test_inputs_still_used_after_the_call_are_not_overwritten(rank, size):
    # The lowering reduces in place; XLA must copy an operand that is still needed.
    @tf.function(jit_compile=True)
    def step(x):
        return tfring.allreduce(x, op=tfring.Sum), x + 0.0

    x = mine(rank, (5,))
    reduced, kept = step(tf.constant(x))
    np.testing.assert_array_equal(kept, x)
    np.testing.assert_allclose(reduced, sum(mine(r, (5,)) for r in range(size)), rtol=1e-6)


def test_repeated_calls_of_one_compiled_step(rank, size):
    step = tf.function(lambda x: tfring.allreduce(x, op=tfring.Sum), jit_compile=True)
    for i in range(20):
        got = step(tf.constant(rank_input(rank, (3,), tf.int32) + i))
        want = sum(rank_input(r, (3,), tf.int32) + i for r in range(size))
        np.testing.assert_array_equal(got, want)


def test_gradient_under_xla_equals_the_eager_one(rank, size):
    w = tf.Variable(mine(rank, (3, 2)))

    def loss_and_grad():
        with tf.GradientTape() as tape:
            y = tfring.allreduce(tf.tanh(w) * (rank + 1.0), op=tfring.Average)
            loss = tf.reduce_sum(y * y)
        return loss, tape.gradient(loss, w)

    eager_loss, eager_grad = loss_and_grad()
    xla_loss, xla_grad = tf.function(loss_and_grad, jit_compile=True)()
    np.testing.assert_allclose(xla_loss, eager_loss, rtol=1e-6)
    np.testing.assert_allclose(xla_grad, eager_grad, rtol=1e-5, atol=1e-7)


def test_distributed_gradient_tape_under_xla(rank, size):
    w = tf.Variable(np.ones((4,), np.float32))
    x = tf.constant(mine(rank, (4,)))

    @tf.function(jit_compile=True)
    def grads():
        with tfring.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = tf.reduce_sum(w * x)
        return tape.gradient(loss, [w])[0]

    np.testing.assert_allclose(grads(), sum(mine(r, (4,)) for r in range(size)) / size,
                               rtol=1e-6)


def test_collectives_without_a_lowering_fail_naming_the_op(rank, size):
    @tf.function(jit_compile=True)
    def gather(x):
        return tfring.allgather(x)

    with pytest.raises(NotImplementedError, match=r"tfring\.allgather .* cannot run inside an "
                                                  r"XLA-compiled function"):
        gather(tf.zeros([2]))
    with pytest.raises(NotImplementedError, match=r"tfring\.join .* cannot run inside"):
        tf.function(tfring.join, jit_compile=True)()
    # Nothing was queued: the next collective pairs as usual.
    np.testing.assert_array_equal(tfring.allreduce(tf.ones([2]), op=tfring.Sum), [size, size])


def test_mismatch_under_xla_fails_on_every_rank_naming_the_tensor(rank, size):
    step = tf.function(lambda x: tfring.allreduce(x, name="xla_bad_shape"), jit_compile=True)
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched shapes for tensor 'xla_bad_shape': rank 0 sent "
                             r"\[2\], rank 1 sent \[3\]"):
        step(tf.zeros([2 + rank]))
    np.testing.assert_array_equal(tfring.allreduce(tf.ones([1]), op=tfring.Sum), [size])


def test_grouped_under_xla_is_one_unit_as_eagerly(rank, size):
    # A grouped allreduce travels as one unit under XLA too: a tensor that differs between
    # ranks is named, and rank 0's XLA call pairs with the others' eager op of that name.
    step = tf.function(lambda a, b: tfring.grouped_allreduce([a, b], name="xla_bad_group"),
                       jit_compile=True)
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched shapes for tensor 'xla_bad_group\.1': rank 0 sent "
                             r"\[3\], rank 1 sent \[4\]"):
        step(tf.zeros([2]), tf.zeros([3 + rank]))
    a, b = tf.fill([2], float(rank)), tf.range(5, dtype=tf.int32) * (rank + 1)
    both = lambda a, b: tfring.grouped_allreduce([a, b], op=tfring.Sum, name="xla_or_eager")
    got = tf.function(both, jit_compile=True)(a, b) if rank == 0 else both(a, b)
    np.testing.assert_array_equal(got[0], np.full(2, float(sum(range(size)))))
    np.testing.assert_array_equal(got[1], np.arange(5) * sum(range(1, size + 1)))


def fit(rank, size, optimizer, jit_compile, **options):
    return _keras_problem.fit_distributed(keras, rank, size, optimizer, steps=STEPS,
                                          jit_compile=jit_compile, **options)


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.SGD(0.1),
    lambda: keras.optimizers.Adam(0.01),
], ids=["sgd", "adam"])
def test_keras_fit_keeps_xla_and_matches_one_process(rank, size, make_optimizer):
    model, opt = fit(rank, size, make_optimizer(), jit_compile=True)
    assert model.jit_compile is True
    assert int(opt.iterations) == STEPS
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "xla fit")
    want = reference_weights(keras, make_optimizer(), STEPS, size)
    for got, expected in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_keras_fit_with_sparse_gradients_and_accumulation_under_xla(rank, size):
    # An Embedding's gradient is tf.IndexedSlices: under XLA it is reduced as a dense one.
    model, opt = fit(rank, size, keras.optimizers.SGD(0.1), jit_compile=True,
                     embedding=True, passes=2, average_aggregated_gradients=True)
    assert model.jit_compile is True
    assert int(opt.iterations) == STEPS
    assert_same_on_all_ranks(weights_and_optimizer_state(model), "xla sparse fit")
    want = reference_weights(keras, keras.optimizers.SGD(0.1), STEPS, size, passes=2,
                             embedding=True)
    for got, expected in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_callbacks_leave_jit_compile_on(rank, size):
    # Rank r fits y = r + 1 (x all ones): only averaged gradients and averaged metrics make
    # every rank's weights and losses those of one process fitting all ranks' rows at once,
    # computed here without tfring (and without XLA).
    def rows(r, n):
        return (np.ones((n, _keras_problem.FEATURES), np.float32),
                np.full((n, 1), r + 1.0, np.float32))

    model = make_model(keras, seed=rank)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse",
                  jit_compile=True)
    x, y = rows(rank, 2 * BATCH)
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    assert model.jit_compile is True
    assert_same_on_all_ranks(model.get_weights(), "xla callbacks")

    reference = make_model(keras, seed=0)  # rank 0's weights, which the broadcast gave all
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    # Each global step holds BATCH rows of every rank; every step's rows are alike.
    step_rows = [rows(r, BATCH) for r in range(size)]
    gx = np.concatenate([a for a, _ in step_rows] * 2)
    gy = np.concatenate([b for _, b in step_rows] * 2)
    want = reference.fit(gx, gy, batch_size=size * BATCH, epochs=2, shuffle=False, verbose=0)
    for got, expected in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # The epochs' averaged losses: the mean of the ranks' losses is the global batch's.
    np.testing.assert_allclose(history.history["loss"], want.history["loss"], rtol=1e-5)


def test_any_name_survives_the_trip_through_xla(rank, size):
    # The name travels in the custom call's attributes as an MLIR string.
    odd = 'odd "name" \\ with é, {braces} = and : marks'
    step = tf.function(lambda x: tfring.allreduce(x, op=tfring.Sum, name=odd), jit_compile=True)
    np.testing.assert_array_equal(step(tf.ones([2])), [size, size])
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=re.escape(f"Mismatched shapes for tensor '{odd}!'")):
        tf.function(lambda x: tfring.allreduce(x, name=odd + "!"), jit_compile=True)(
            tf.zeros([1 + rank]))


def test_a_sparse_gradient_under_xla_is_reduced_as_a_dense_one(rank, size):
    # tf.gather's gradient is tf.IndexedSlices, whose eager reduction is an allgather (no
    # XLA lowering): under XLA the tape reduces it densely instead.
    table = tf.Variable(np.zeros((4, 2), np.float32))

    @tf.function(jit_compile=True)
    def grads():
        with tfring.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = tf.reduce_sum(tf.gather(table, [rank % 4]) * (rank + 1.0))
        return tf.convert_to_tensor(tape.gradient(loss, [table])[0])

    want = np.zeros((4, 2), np.float32)
    for r in range(size):
        want[r % 4] += (r + 1.0) / size
    np.testing.assert_allclose(grads(), want, rtol=1e-6)


def test_keras_fit_under_mixed_float16_keeps_xla_and_skips_the_same_step_everywhere(rank, size):
    # mixed_float16 with jit_compile=True: the optimizer becomes a DistributedLossScaleOptimizer
    # whose reduction, finite check and skip are compiled into the step. The last rank's first
    # batch overflows float16 there only: every rank must skip that step and halve its loss
    # scale, and the three steps applied must be those of one process (float32 arithmetic,
    # the same policy, no tfring, no XLA) on the global batch from rank 0's weights.
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        opt = hvd.DistributedOptimizer(
            keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=1.0))
        assert isinstance(opt, hvd.DistributedLossScaleOptimizer)
        model = make_model(keras, seed=1 if rank == 0 else 9)
        model.compile(optimizer=opt, loss="mse", jit_compile=True)
        x, _, y = _keras_problem.shard(_keras_problem.global_data(STEPS, size), rank, size)
        if rank == size - 1:
            x = x.copy()
            x[:BATCH] *= 1e6
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        assert model.jit_compile is True
        assert int(opt.iterations) == STEPS - 1
        assert float(opt.dynamic_scale) == 0.5
        assert_same_on_all_ranks(weights_and_optimizer_state(model), "xla mixed")

        reference = make_model(keras, seed=1)
        reference.compile(optimizer=keras.optimizers.LossScaleOptimizer(
            keras.optimizers.SGD(0.1), initial_scale=1.0), loss="mse")
        gx, _, gy = _keras_problem.global_data(STEPS, size)
        step = size * BATCH
        reference.fit(gx[step:], gy[step:], batch_size=step, epochs=1, shuffle=False,
                      verbose=0)
        for got, want in zip(model.get_weights(), reference.get_weights()):
            # float16 forward passes on batches of different sizes: measured 6e-5 apart at
            # most (weights up to 0.7); applying the overflowed step would move them by far more.
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=2e-4)
    finally:
        keras.mixed_precision.set_global_policy("float32")
