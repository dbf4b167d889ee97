"""tfring.keras.DistributedOptimizer(shard_optimizer_state=True) on Keras 3: training equals
unsharded training, every rank ends each step with the same weights, each rank holds its
block of the optimizer state only, and what the mode cannot do is refused, saying why.

The optimizers are compared by their apply (a few steps in a tf.function) against the plain
Keras optimizer given the average of every rank's gradients, which each rank computes in
numpy (_sharded_util.py); one comparison runs model.fit. Checkpoints:
test_sharded_checkpoints.py; refusals at build and at the first step, and constraints:
test_sharded_refusals.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as tk

from _sharded_util import ADAMW_GROUPS, STEPS, _adamw, _assert_same_on_every_rank, \
    _compare, _flat, _model, apply_steps, block_length, check_accumulation_and_loss_scale, \
    check_apply_equals_unsharded, check_fp16_compression, check_loss_scale_skips_on_every_rank, \
    check_one_reducescatter_and_one_grouped_allgather, check_xla_step, keras3_apply, \
    mean_gradients, numpy_dtype, padded_total, rank_gradients, state_elements, sweep


@pytest.mark.parametrize("make_optimizer,groups", sweep()[0], ids=sweep()[1])
def test_apply_equals_the_plain_optimizer_on_averaged_gradients(make_optimizer, groups):
    # The clipping ones too: clipnorm and global_clipnorm must use whole norms.
    check_apply_equals_unsharded(make_optimizer, groups=groups)


def test_fit_equals_unsharded_fit():
    """The one fit-based comparison on Keras 3: model.fit's train step through the wrapper
    (apply_gradients, the first step building the blocks), sharded against unsharded, each
    rank its own data; the weights the same on every rank after every batch."""
    _compare(lambda: keras.optimizers.Adam(0.01))


@pytest.mark.parametrize("make_optimizer,groups",
                         [(lambda: keras.optimizers.Adam(0.01), None), (_adamw, ADAMW_GROUPS)],
                         ids=["adam", "adamw-two-groups"])
def test_jit_compile_keeps_xla(make_optimizer, groups):
    # The step stays compiled (an allgather could not be: there the blocks are summed into
    # place), and equals the plain optimizer's step under XLA.
    check_xla_step(make_optimizer, groups=groups)


def test_accumulation_and_loss_scale():
    # Keras 3's LossScaleOptimizer.apply unscales: it is given gradients scaled by 2**10;
    # `iterations` counts applied steps.
    check_accumulation_and_loss_scale(
        keras, lambda inner, scale: keras.optimizers.LossScaleOptimizer(inner, initial_scale=scale),
        keras3_apply, 2.0 ** 10, counted_passes=False)


def test_fp16_compression_sends_float16_and_rounds_as_unsharded():
    check_fp16_compression(keras, lambda: keras.optimizers.SGD(1.0),
                           lambda opt, grads, variables: opt.apply(grads, variables),
                           lambda opt, variables: opt.build(variables))


def test_a_step_issues_one_grouped_reducescatter_and_one_grouped_allgather(rank):
    """AdamW with the biases excluded from decay: two groups of float32, one reducescatter
    (the groups as rows of one tensor) and one grouped allgather; as unsharded."""
    rng = np.random.default_rng(rank)
    results = {}
    for sharded in (False, True):
        model = _model()
        variables = model.trainable_variables
        optimizer = tk.DistributedOptimizer(_adamw(), shard_optimizer_state=sharded)
        optimizer.build(variables)
        grads = [tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in variables]
        step = tf.function(lambda: optimizer.apply(grads, variables))
        step()
        step()
        results[sharded] = (_flat(model.get_weights()), optimizer)
        rng = np.random.default_rng(rank)  # the same gradients again
    check_one_reducescatter_and_one_grouped_allgather(step, optimizer, results)


def test_loss_scale_skips_on_every_rank_when_one_block_is_not_finite(rank):
    # Keras 3's apply unscales: ones at scale 2 move each weight by 0.1 / 2.
    check_loss_scale_skips_on_every_rank(
        rank, keras, lambda sgd: keras.optimizers.LossScaleOptimizer(sgd, initial_scale=4.0),
        lambda opt, grads, variables: opt.apply(grads, variables),
        lambda opt: opt.dynamic_scale.numpy(), 0.1 / 2.0)


def test_refusals_say_why():
    sgd = keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="Adasum combines whole gradients"):
        tk.DistributedOptimizer(sgd, shard_optimizer_state=True, op=tfring.Adasum)
    with pytest.raises(ValueError, match="process set"):
        tk.DistributedOptimizer(sgd, shard_optimizer_state=True,
                                process_set=tfring.ProcessSet([0]))
    with pytest.raises(ValueError, match="groups"):
        tk.DistributedOptimizer(sgd, shard_optimizer_state=True, groups=2)
    opt = tk.DistributedOptimizer(sgd, shard_optimizer_state=True)
    with pytest.raises(ValueError, match="cannot keep a variable local"):
        opt.register_local_var(keras.Variable(1.0))
    with pytest.raises(ValueError, match="cannot keep local_layers local"):
        tk.PartialDistributedOptimizer(sgd, shard_optimizer_state=True,
                                       local_layers=[keras.layers.Dense(2)])
    # Known at construction, so refused there (and in a LossScaleOptimizer).
    with pytest.raises(ValueError, match="does not support use_ema=True"):
        tk.DistributedOptimizer(keras.optimizers.SGD(0.1, use_ema=True),
                                shard_optimizer_state=True)
    with pytest.raises(ValueError, match="does not support use_ema=True"):
        tk.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(
            keras.optimizers.SGD(0.1, use_ema=True)), shard_optimizer_state=True)


def test_a_step_while_a_rank_has_joined_fails_saying_so(rank, size):
    # Uneven data: rank 0 ran out and joined; the others' next step names it, no hang.
    model = _model()
    optimizer = tk.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True)
    optimizer.build(model.trainable_variables)
    if rank == 0:
        tfring.join()
        return
    grads = [tf.ones_like(v) for v in model.trainable_variables]
    try:
        with pytest.raises(tf.errors.FailedPreconditionError,
                           match=r"rank\(s\) \[0\] have joined.*shard_optimizer_state=True"):
            optimizer.apply(grads, model.trainable_variables)
    finally:  # rank 0 waits for every rank to join, whatever happened here
        tfring.join()


def test_sparse_gradients_need_sparse_as_dense(rank, size):
    """An Embedding's gradient is sparse (tf.IndexedSlices, rows repeated): refused without
    sparse_as_dense, naming the variable; with it, the update is plain Adam's on the average
    of every rank's gradients made dense (numpy: repeated rows add up)."""
    def variables():
        return [keras.Variable(np.linspace(-1, 1, 27).reshape(9, 3).astype(np.float32),
                               name="embeddings"),
                keras.Variable(np.ones((3, 1), np.float32), name="kernel")]

    def gradients(r):  # (rows, their values, the kernel's dense gradient) at each step
        rng = np.random.default_rng([5, r])
        return (rng.integers(0, 9, size=(STEPS, 4)),
                rng.normal(size=(STEPS, 4, 3)).astype(np.float32),
                rng.normal(size=(STEPS, 3, 1)).astype(np.float32))

    def dense(rows, values):
        out = np.zeros((9, 3), np.float64)
        np.add.at(out, rows, values)
        return out

    mine = variables()
    rows, values, kernel = gradients(rank)
    refusing = tk.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True)
    with pytest.raises(ValueError, match=r"gradient of 'embeddings' is sparse.*"
                                         r"pass sparse_as_dense=True"):
        refusing.apply([tf.IndexedSlices(values[0], rows[0], [9, 3]), kernel[0]], mine)
    optimizer = tk.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True,
                                        sparse_as_dense=True)
    optimizer.build(mine)

    @tf.function
    def step(rows, values, kernel):
        optimizer.apply([tf.IndexedSlices(values, rows, tf.constant([9, 3])), kernel], mine)

    got = []
    for s in range(STEPS):
        step(tf.constant(rows[s]), tf.constant(values[s]), tf.constant(kernel[s]))
        got.append(_flat([v.numpy() for v in mine]))
    ranks = [gradients(r) for r in range(size)]
    averaged = [[np.mean([dense(g[0][s], g[1][s]) for g in ranks], 0).astype(np.float32),
                 np.mean([g[2][s] for g in ranks], 0)] for s in range(STEPS)]
    reference = variables()
    plain = keras.optimizers.Adam(0.01)
    plain.build(reference)
    want, _ = apply_steps(plain, reference, averaged)
    assert np.abs(want[-1] - _flat([v.numpy() for v in variables()])).max() > 1e-3
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(np.concatenate(got))
    # Adam's two moments of this rank's block of the 27 + 3 elements (32 + 16 padded).
    assert state_elements(optimizer) == 2 * block_length(padded_total([27, 3]), rank, size)


# Each dtype's rounding: float16 weights near 1 are 2**-10 apart, and the float16 gradient
# averaged by the reducescatter may differ from the reference's by a unit in its last place.
TOLERANCE = {np.float16: dict(rtol=0, atol=2 * 2.0 ** -10),
             np.float32: dict(rtol=1e-6, atol=1e-7),
             np.float64: dict(rtol=1e-12, atol=1e-14)}


def test_variables_of_several_dtypes_each_rank_holds_its_blocks(rank, size):
    """float64, float16 and float32 variables: three buffers, each padded for its element
    size (8, 32 and 16 elements to 64 bytes) and split over the ranks. Each rank's momentum
    is its block of each buffer and no more (a fallback to unsharded state would hold whole
    variables), and every variable equals plain SGD's on the averaged gradients within its
    own dtype's rounding."""
    shapes = {np.float64: [(6, 9), (9,)], np.float16: [(9, 11), (11,)],
              np.float32: [(11, 1), (1,)]}

    def variables():
        rng = np.random.default_rng(4)
        return [keras.Variable(rng.normal(scale=0.5, size=shape).astype(dtype), dtype=dtype,
                               name=f"{dtype.__name__}_{i}")
                for dtype, group in shapes.items() for i, shape in enumerate(group)]

    def make():
        return keras.optimizers.SGD(0.05, momentum=0.9)

    mine = variables()
    optimizer = tk.DistributedOptimizer(make(), shard_optimizer_state=True)
    optimizer.build(mine)
    got, _ = apply_steps(optimizer, mine, rank_gradients(mine, rank))
    reference = variables()
    plain = make()
    plain.build(reference)
    want, _ = apply_steps(plain, reference, mean_gradients(reference, size))
    blocks = sorted((np.dtype(dtype).name, block_length(
        padded_total([int(np.prod(s)) for s in group], np.dtype(dtype).itemsize), rank, size))
        for dtype, group in shapes.items())
    momentum = sorted((tf.as_dtype(v.dtype).name, int(np.prod(v.shape)))
                      for v in optimizer.inner_optimizer.variables if len(v.shape) > 0)
    assert momentum == blocks, (momentum, blocks)
    assert all(len(v.shape) == 1 for v in optimizer.inner_optimizer.variables
               if len(v.shape) > 0)
    offsets = np.cumsum([0] + [int(np.prod(v.shape)) for v in mine])
    for s, (g, w) in enumerate(zip(got, want)):
        for j, v in enumerate(mine):
            dtype = numpy_dtype(v).type
            piece = slice(offsets[j], offsets[j + 1])
            np.testing.assert_allclose(g[piece], w[piece], err_msg=f"{v.name}, step {s + 1}",
                                       **TOLERANCE[dtype])
    initial = _flat([v.numpy() for v in variables()])
    assert np.abs(want[-1] - initial).max() > 1e-2, "the steps did not move the weights"
    _assert_same_on_every_rank(np.concatenate(got))
