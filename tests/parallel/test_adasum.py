"""op=tfring.Adasum against a numpy tree of pairwise Adasum steps: the collectives in every
mode and dtype, groups, gradients, process sets, the gradient wrappers (tape, Keras, TF1's
delta optimizer), and Horovod's errors (non-power-of-two sets, sparse, integers)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd_keras
from _util import MODES, rank_input, run

v1 = tf.compat.v1


def pair(a, b):
    """Adasum of two arrays, in float64: each scaled down by half its projection on the
    other, so equal arrays average and orthogonal arrays add."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    dot, aa, bb = np.vdot(a, b), np.vdot(a, a), np.vdot(b, b)
    a_coeff = 1.0 - dot / (2 * aa) if aa else 1.0
    b_coeff = 1.0 - dot / (2 * bb) if bb else 1.0
    return a_coeff * a + b_coeff * b


def tree(values):
    """Adasum over ranks 0..n-1 (n a power of two): neighbours first, then pairs of pairs."""
    level = list(values)
    while len(level) > 1:
        level = [pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def power_of_two(n):
    return n & (n - 1) == 0


needs_power_of_two = pytest.mark.skipif(
    not power_of_two(tfring.size()),
    reason="Adasum needs a power-of-two number of ranks (the error is tested at 3 ranks)")

TOLERANCE = {tf.float16: 2e-3, tf.bfloat16: 2e-2, tf.float32: 1e-5, tf.float64: 1e-12}
DTYPES = list(TOLERANCE)


@pytest.fixture
def members(size):
    """The largest power-of-two prefix of the ranks: all of them at 2 and 4 ranks, [0, 1] at
    3 (where rank 2 sits the test out). The collective tests run among them."""
    return tfring.ProcessSet(range(1 << (size.bit_length() - 1)))


def among(members, make):
    """Every member's input, made by make(rank), and this rank's."""
    inputs = [make(r) for r in members.ranks]
    return inputs, inputs[members.rank()]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allreduce_matches_numpy_tree(dtype, mode, members):
    if not members.included():
        return
    inputs, mine = among(members, lambda r: rank_input(r, (3, 4), dtype))
    got = run(mode, lambda t: tfring.allreduce(tf.cast(t, dtype), op=tfring.Adasum,
                                               process_set=members), mine)
    np.testing.assert_allclose(np.asarray(tf.cast(got, tf.float64)), tree(inputs),
                               rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def test_equal_inputs_average_and_orthogonal_inputs_add(members):
    if not members.included():
        return
    same = tfring.allreduce(tf.constant([2.0, -1.0, 4.0]), op=tfring.Adasum, name="ada.same",
                            process_set=members)
    np.testing.assert_allclose(same.numpy(), [2.0, -1.0, 4.0])
    n, position = members.size(), members.rank()
    one_hot = np.eye(n, dtype=np.float32)[position] * (position + 1)
    orthogonal = tfring.allreduce(one_hot, op=tfring.Adasum, name="ada.orthogonal",
                                  process_set=members)
    np.testing.assert_allclose(orthogonal.numpy(), np.arange(1, n + 1, dtype=np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_gives_each_tensor_its_own_coefficients(mode, members):
    if not members.included():
        return
    shapes = [((2, 3), tf.float32), ((5,), tf.float64), ((4,), tf.float32), ((2, 2), tf.float16)]
    inputs, mine = among(members, lambda r: [rank_input(r + 10 * i, s, d)
                                             for i, (s, d) in enumerate(shapes)])
    inputs[0][2] = np.zeros(4, np.float32)  # a zero vector keeps its partner's coefficient 1

    def fn(*tensors):
        return tfring.grouped_allreduce([tf.cast(t, d) for t, (_, d) in zip(tensors, shapes)],
                                        op=tfring.Adasum, name=f"ada.group.{mode}",
                                        process_set=members)
    got = run(mode, fn, *mine)
    for i, (shape, dtype) in enumerate(shapes):
        column = [member_inputs[i] for member_inputs in inputs]
        assert got[i].shape == shape and got[i].dtype == dtype.as_numpy_dtype
        np.testing.assert_allclose(got[i].astype(np.float64), tree(column),
                                   rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def test_scale_factors_and_fp16_compression(members):
    if not members.included():
        return
    inputs, mine = among(members, lambda r: rank_input(r, (6,), tf.float32))
    got = tfring.allreduce(mine, op=tfring.Adasum, prescale_factor=2.0, postscale_factor=0.25,
                           compression=tfring.Compression.fp16, process_set=members)
    assert got.dtype == tf.float32
    # float16 between tree levels: errors of about 1e-3 of the largest value.
    np.testing.assert_allclose(got.numpy(), 0.25 * tree([2.0 * x for x in inputs]), rtol=2e-3,
                               atol=5e-3)


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "function"])
def test_gradient_is_the_adasum_of_the_gradients(in_function, members):
    if not members.included():
        return
    weights, mine = among(members, lambda r: rank_input(r, (4,), tf.float32) + 0.5)
    x = tf.constant([1.0, 2.0, 3.0, 4.0])

    def gradient():
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(
                tfring.allreduce(x, op=tfring.Adasum, process_set=members) * mine)
        return tape.gradient(loss, x)
    got = (tf.function(gradient) if in_function else gradient)()
    np.testing.assert_allclose(got.numpy(), tree(weights), rtol=1e-5)


def test_process_set_of_two(rank, size):
    # Runs at any size: a set of two ranks (at 3 ranks, [0, 2]) is a power of two.
    members = tfring.ProcessSet([0, size - 1])
    inputs = {r: rank_input(r, (5,), tf.float32) for r in (0, size - 1)}
    if rank in inputs:
        got = tfring.allreduce(inputs[rank], op=tfring.Adasum, process_set=members,
                               name="ada.set")
        np.testing.assert_allclose(got.numpy(), pair(inputs[0], inputs[size - 1]), rtol=1e-6)
    tfring.barrier()


@pytest.mark.skipif(power_of_two(tfring.size()), reason="runs at a non-power-of-two size (3)")
def test_non_power_of_two_set_is_refused_then_ops_pair(rank, size):
    with pytest.raises(NotImplementedError, match=f"non-power of 2 ranks.*{size} ranks"):
        tfring.allreduce(tf.ones([2]), op=tfring.Adasum)
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * v)
    with pytest.raises(NotImplementedError, match="non-power of 2"):
        tfring.DistributedGradientTape(tape, op=tfring.Adasum).gradient(loss, [v])
    after = tfring.allreduce(tf.constant([float(rank)]), op=tfring.Sum)
    np.testing.assert_allclose(after.numpy(), [sum(range(size))])


def test_errors_name_the_problem(rank, size):
    with pytest.raises(TypeError, match="floating-point tensors only.*int32"):
        tfring.allreduce(tf.constant([1, 2]), op=tfring.Adasum, name="ints")
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]))
    with pytest.raises(NotImplementedError, match="sparse_as_dense=True"):
        tfring.allreduce(slices, op=tfring.Adasum)
    with pytest.raises(NotImplementedError, match="reducescatter does not support op=Adasum"):
        tfring.reducescatter(tf.ones([4]), op=tfring.Adasum)
    with pytest.raises(ValueError, match="average_aggregated_gradients"):
        hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), op=tfring.Adasum,
                                       backward_passes_per_step=2,
                                       average_aggregated_gradients=True)
    after = tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name="ada.after_errors")
    np.testing.assert_allclose(after.numpy(), [size])


@needs_power_of_two
def test_shapes_that_differ_across_ranks_fail_on_every_rank(rank, size):
    with pytest.raises(tf.errors.FailedPreconditionError, match="ada.mismatch.*rank 0 sent"):
        tfring.allreduce(tf.ones([3 + rank]), op=tfring.Adasum, name="ada.mismatch")
    after = tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name="ada.after_mismatch")
    np.testing.assert_allclose(after.numpy(), [size])


def linear_gradients(r, w, b):
    """Rank r's gradients of mean((x w + b - y)^2) on its own data."""
    x = rank_input(r, (4, 3), tf.float32).astype(np.float64)
    y = rank_input(r + 50, (4, 1), tf.float32).astype(np.float64)
    error = x @ w + b - y
    return x, y, 2 * x.T @ error / error.size, 2 * error.sum(0) / error.size


@needs_power_of_two
def test_gradient_tape(rank, size):
    w, b = np.full((3, 1), 0.5), np.array([0.25])
    x, y, _, _ = linear_gradients(rank, w, b)
    wv, bv = tf.Variable(w, dtype=tf.float64), tf.Variable(b, dtype=tf.float64)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.constant(x) @ wv + bv - tf.constant(y)))
    grads = tfring.DistributedGradientTape(tape, op=tfring.Adasum).gradient(loss, [wv, bv])
    per_rank = [linear_gradients(r, w, b)[2:] for r in range(size)]
    np.testing.assert_allclose(grads[0].numpy(), tree([g[0] for g in per_rank]), rtol=1e-10)
    np.testing.assert_allclose(grads[1].numpy(), tree([g[1] for g in per_rank]), rtol=1e-10)


@needs_power_of_two
def test_keras_fit_applies_the_adasum_of_the_gradients(rank, size):
    if keras.__version__.startswith("2."):
        pytest.skip("Keras 3")
    w, b, lr = np.full((3, 1), 0.5), np.array([0.25]), 0.125  # exact as float32
    x, y, _, _ = linear_gradients(rank, w, b)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(
        1, kernel_initializer=keras.initializers.Constant(0.5),
        bias_initializer=keras.initializers.Constant(0.25), dtype="float64")])
    model.compile(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(lr), op=tfring.Adasum),
                  loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    per_rank = [linear_gradients(r, w, b)[2:] for r in range(size)]
    kernel, bias = model.get_weights()
    np.testing.assert_allclose(kernel, w - lr * tree([g[0] for g in per_rank]), rtol=1e-10)
    np.testing.assert_allclose(bias, b - lr * tree([g[1] for g in per_rank]), rtol=1e-10)


@needs_power_of_two
@pytest.mark.parametrize("init_first", [False, True], ids=["minimize_first", "init_first"])
@pytest.mark.parametrize("period", [1, 2])
def test_tf1_optimizer_combines_the_updates_every_period(period, init_first, rank, size):
    """Each rank steps w with its own gradient 2 (w - t_r); every `period` runs the changes
    since the last combination are combined with Adasum and every rank takes the result.
    init_first: the order of Horovod's TF1 synthetic benchmark, whose initializer is built
    (and run) before minimize() makes the optimizer's own state."""
    lr, w0 = 0.125, np.array([1.0, -2.0, 0.5])  # the optimizer holds lr as float32
    targets = [rank_input(r, (3,), tf.float64) for r in range(size)]

    def local_steps(w, r, n):
        for _ in range(n):
            w = w - lr * 2 * (w - targets[r])
        return w
    with tf.Graph().as_default():
        w = v1.get_variable("w", initializer=tf.constant(w0), use_resource=True)
        loss = tf.reduce_sum(tf.square(w - tf.constant(targets[rank])))
        opt = tfring.DistributedOptimizer(v1.train.GradientDescentOptimizer(lr),
                                          op=tfring.Adasum, backward_passes_per_step=period)
        init = v1.global_variables_initializer()
        train_op = None if init_first else opt.minimize(loss)
        with v1.Session() as session:
            session.run(init if init_first else v1.global_variables_initializer())
            if init_first:
                train_op = opt.minimize(loss)
            want = w0
            for combination in range(2):
                for run_index in range(period):
                    session.run(train_op)
                    if run_index < period - 1:  # between combinations: this rank's own steps
                        np.testing.assert_allclose(session.run(w),
                                                   local_steps(want, rank, run_index + 1))
                deltas = [local_steps(want, r, period) - want for r in range(size)]
                want = want + tree(deltas)
                np.testing.assert_allclose(session.run(w), want, rtol=1e-12)
