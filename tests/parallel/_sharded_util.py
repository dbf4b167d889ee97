"""Helpers of the shard_optimizer_state=True tests: a model whose variables (42 + 7 + 35 + 5
+ 5 + 1 = 95 elements, 160 with the padding that aligns each) do not divide into the ranks' blocks at 2 or 3 ranks, so blocks
split variables; each rank's data; unsharded against sharded. `k` is the Keras module:
Keras 3 (the default) or tf_keras (tf.keras under TF_USE_LEGACY_KERAS=1)."""

import keras
import numpy as np
import tensorflow as tf

import tfring
import tfring.keras as tk

STEPS, BATCH = 3, 4
SIZES = [42, 7, 35, 5, 5, 1]
# The flat buffer that the blocks divide starts each variable 64 bytes (16 float32) aligned;
# the zeros in between belong to the blocks too (tfring/_sharded_state.py, ALIGN_BYTES).
PADDED_TOTAL = sum(-(-n // 16) * 16 for n in SIZES)


def block_size(rank, size):
    """The elements of this rank's block: the padded buffer split as evenly as can be."""
    return PADDED_TOTAL // size + (1 if rank < PADDED_TOTAL % size else 0)


def _model(k=keras):
    k.utils.set_random_seed(3)
    x = k.Input((6,))
    h = k.layers.Dense(7, activation="tanh")(x)
    h = k.layers.Dense(5, activation="tanh")(h)
    return k.Model(x, k.layers.Dense(1)(h))


def _data(rank):
    rng = np.random.default_rng(10 + rank)  # each rank its own data
    n = STEPS * BATCH
    return (rng.normal(size=(n, 6)).astype(np.float32),
            rng.normal(size=(n, 1)).astype(np.float32))


def _fit(make_optimizer, sharded, callbacks=(), k=keras, jit_compile=False, steps=None,
         **options):
    """Trains a fresh model; `steps`, a list, gets its weights (flat) after every batch."""
    model = _model(k)
    optimizer = tk.DistributedOptimizer(make_optimizer(), shard_optimizer_state=sharded,
                                        **options)
    model.compile(optimizer=optimizer, loss="mse", jit_compile=jit_compile)
    x, y = _data(tfring.rank())
    callbacks = list(callbacks)
    if steps is not None:
        class EveryStep(k.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                steps.append(_flat(self.model.get_weights()))
        callbacks.append(EveryStep())
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    return model


def _flat(weights):
    return np.concatenate([np.ravel(w) for w in weights])


def _assert_same_on_every_rank(flat):
    gathered = tfring.allgather(tf.constant(flat[None])).numpy()
    for r in range(1, len(gathered)):
        np.testing.assert_array_equal(gathered[r], gathered[0], err_msg=f"rank {r} differs")


def _compare(make_optimizer, rtol=1e-5, atol=1e-6, k=keras, **options):
    initial = _flat(_model(k).get_weights())
    plain_model = _fit(make_optimizer, False, k=k, **options)
    steps = []
    sharded_model = _fit(make_optimizer, True, k=k, steps=steps, **options)
    if options.get("jit_compile"):
        assert plain_model.jit_compile and sharded_model.jit_compile
    plain, sharded = _flat(plain_model.get_weights()), _flat(sharded_model.get_weights())
    assert np.abs(plain - initial).max() > 1e-3, "training did not move the weights"
    np.testing.assert_allclose(sharded, plain, rtol=rtol, atol=atol)
    assert len(steps) == STEPS
    _assert_same_on_every_rank(np.concatenate(steps))  # after every step, not only the last
    assert_state_is_a_block(plain_model.optimizer, sharded_model.optimizer)


def state_elements(optimizer):
    """The elements of an optimizer's state: its slots, the scalars (step counters, the
    learning rate, a loss scale) aside. A slot of the model's one-element bias counts."""
    variables = optimizer.variables
    variables = variables() if callable(variables) else variables  # tf_keras's legacy
    return sum(int(np.prod(v.shape)) for v in variables if len(v.shape) > 0)


def assert_state_is_a_block(plain, sharded):
    """Each rank holds about 1/N of the unsharded state (no silent fallback to unsharded):
    every element of it on one rank only, in blocks that differ by an element per group."""
    whole = state_elements(plain)
    slots = whole // sum(SIZES)  # Adam's two moments, SGD's momentum, ...
    assert whole == slots * sum(SIZES), whole
    mine = state_elements(sharded)
    total = int(tfring.allreduce(tf.constant(mine), op=tfring.Sum).numpy())
    assert total == slots * PADDED_TOTAL, (mine, total, whole)
    # Two groups at most here (AdamW: with weight decay, without).
    assert abs(mine - slots * PADDED_TOTAL / tfring.size()) <= 2 * slots, (mine, whole)


def check_one_reducescatter_and_one_grouped_allgather(step, optimizer, results):
    """AdamW's two groups: the traced sharded `step` holds one reducescatter and one grouped
    allgather, and `results` ({sharded: (weights, optimizer)}) agree with unsharded."""
    ops = [n.op for n in traced_nodes(step)]
    assert len(optimizer._sharded.update.layouts) == 2
    assert ops.count("TfringReducescatter") == 1, ops
    assert ops.count("TfringGroupedAllgather") == 1 and "TfringAllgather" not in ops, ops
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(results[True][0])
    assert_state_is_a_block(results[False][1], results[True][1])


def _adamw(k=keras):
    opt = k.optimizers.AdamW(0.01, weight_decay=0.2)
    opt.exclude_from_weight_decay(var_names=["bias"])  # two groups: with decay, without
    return opt


def optimizers(k=keras):
    """(makers, ids) of the optimizers every framework's sharded state is compared on."""
    return ([lambda: k.optimizers.SGD(0.1, momentum=0.9), lambda: k.optimizers.Adam(0.01),
             lambda: _adamw(k), lambda: k.optimizers.RMSprop(0.01)],
            ["sgd-momentum", "adam", "adamw-bias-excluded", "rmsprop"])


def clipping_optimizers(k=keras):
    """Norms small enough that every step clips: a norm of a rank's block alone would scale
    differently."""
    return ([lambda: k.optimizers.Adam(0.01, global_clipnorm=0.05),
             lambda: k.optimizers.SGD(0.1, clipnorm=0.02),
             lambda: k.optimizers.SGD(0.1, clipvalue=0.005)],
            ["global-clipnorm", "clipnorm", "clipvalue"])


def check_loss_scale_skips_on_every_rank(rank, k, loss_scale_optimizer, apply, scale_of,
                                         applied_step, sgd=None):
    """An inf in rank 0's gradient of the last weight lands in the last rank's block alone;
    every rank must skip the step and halve the scale, as unsharded every rank would.
    apply(optimizer, grads, variables); scale_of(optimizer) -> the scale now; applied_step:
    what a step of ones moves each weight by at the halved scale; sgd: the SGD(0.1) to
    wrap (default k.optimizers.SGD)."""
    model = _model(k)
    variables = model.trainable_variables
    inner = sgd if sgd is not None else k.optimizers.SGD(0.1)
    optimizer = tk.DistributedOptimizer(loss_scale_optimizer(inner), shard_optimizer_state=True)
    grads = [tf.ones_like(v) for v in variables]
    if rank == 0:
        grads[-1] = tf.fill(tf.shape(grads[-1]), np.inf)
    before = _flat(model.get_weights())
    apply(optimizer, grads, variables)
    np.testing.assert_array_equal(_flat(model.get_weights()), before)
    assert float(scale_of(optimizer)) == 2.0
    apply(optimizer, [tf.ones_like(v) for v in variables], variables)  # finite: applied
    after = _flat(model.get_weights())
    np.testing.assert_allclose(after, before - applied_step, rtol=1e-6)
    _assert_same_on_every_rank(after)


def check_accumulation_and_mixed_precision(k, loss_scale_optimizer):
    """backward_passes_per_step, and mixed precision under a LossScaleOptimizer
    (loss_scale_optimizer(inner, initial_scale)): as unsharded."""
    _compare(lambda: k.optimizers.Adam(0.01), k=k, backward_passes_per_step=3)
    k.mixed_precision.set_global_policy("mixed_float16")
    try:
        _compare(lambda: loss_scale_optimizer(k.optimizers.SGD(0.1, momentum=0.9), 2.0 ** 10),
                 rtol=1e-3, atol=1e-4, k=k)
    finally:
        k.mixed_precision.set_global_policy("float32")


# fp16 compression: the gradients below lose DELTA when a rank casts them to float16 (a
# quarter of a float16 step or less at their magnitude, 2**-6 to 2**-4), and their sums over
# the ranks are multiples of 2**-8 small enough to be exact in float16 in any order: the
# averaged gradient is known exactly with and without the rounding, whatever the order in
# which an allreduce or a reducescatter adds.
DELTA = 2.0 ** -18


def _fp16_gradients(variables, rank, size):
    """(this rank's gradients, their average after float16 rounding) for `variables`."""
    rng = np.random.default_rng(11)  # the same on every rank
    share = 1 if rank == 0 else (-1 if rank == size - 1 else 0)  # sums to 0 over the ranks
    grads, rounded = [], []
    for v in variables:
        whole = rng.integers(6, 12, size=v.shape)  # in 2**-8: the average
        part = rng.integers(0, 3, size=v.shape)  # what ranks 0 and N-1 add and take away
        grads.append(tf.constant(((whole + share * part) * 2.0 ** -8 + DELTA)
                                 .astype(np.float32)))
        rounded.append((whole * 2.0 ** -8).astype(np.float32))
    return grads, rounded


def traced_nodes(function):
    """The nodes of a traced tf.function's graph and of the functions it calls."""
    graph_def = function.get_concrete_function().graph.as_graph_def()
    return list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]


def check_fp16_compression(k, make_sgd, apply, build):
    """compression=fp16 (make_sgd(): SGD at learning rate 1, no momentum): the sharded step
    sends float16 (the reducescatter's dtype), and its update is the average of the rounded
    gradients, exactly as the unsharded compressed allreduce's; without the rounding each
    weight would move DELTA more. apply(optimizer, grads, variables); build(optimizer,
    variables)."""
    rank, size = tfring.rank(), tfring.size()
    initial = _flat(_model(k).get_weights())
    grads, rounded = _fp16_gradients(_model(k).trainable_variables, rank, size)
    want = initial - _flat(rounded)  # float32, as SGD subtracts
    results = {}
    for sharded, compression in ((True, tfring.Compression.fp16),
                                 (False, tfring.Compression.fp16),
                                 (True, tfring.Compression.none)):
        model = _model(k)
        variables = model.trainable_variables
        optimizer = tk.DistributedOptimizer(make_sgd(), shard_optimizer_state=sharded,
                                            compression=compression)
        build(optimizer, variables)

        @tf.function
        def step():
            apply(optimizer, grads, variables)  # returns an op unsharded (legacy tf_keras)

        step()
        results[(sharded, compression)] = _flat(model.get_weights())
        if sharded:
            wire = [tf.as_dtype(n.attr["T"].type) for n in traced_nodes(step)
                    if n.op == "TfringReducescatter"]
            assert wire == [tf.float16 if compression is tfring.Compression.fp16
                            else tf.float32], wire
    # A float32 step (2**-24 to 2**-23 here) at most: well below DELTA.
    tolerance = dict(rtol=0, atol=DELTA / 8)
    np.testing.assert_allclose(results[(False, tfring.Compression.fp16)], want, **tolerance)
    np.testing.assert_allclose(results[(True, tfring.Compression.fp16)], want, **tolerance)
    np.testing.assert_allclose(results[(True, tfring.Compression.none)], want - DELTA,
                               **tolerance)
    _assert_same_on_every_rank(results[(True, tfring.Compression.fp16)])
