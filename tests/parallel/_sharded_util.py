"""Helpers of the shard_optimizer_state=True tests: a model whose variables (42 + 7 + 35 + 5
+ 5 + 1 = 95 elements, 160 with the padding that aligns each) do not divide into the ranks'
blocks at 2 or 3 ranks, so blocks split variables; each rank's data and gradients; sharded
against unsharded. `k` is the Keras module: Keras 3 (the default) or tf_keras (tf.keras under
TF_USE_LEGACY_KERAS=1).

Most comparisons apply gradients directly (`check_apply_equals_unsharded`): a few steps of the
sharded optimizer's apply in a tf.function, against the plain optimizer applied to the average
of every rank's gradients, which each rank computes itself (numpy: every rank's gradients are
seeded by its rank). That is the reference without any training loop; one fit-based
comparison per Keras flavour (`_compare`) keeps model.fit covered."""

import keras
import numpy as np
import tensorflow as tf

import tfring
import tfring.keras as tk

STEPS, BATCH = 3, 4
SIZES = [42, 7, 35, 5, 5, 1]
# AdamW excluding the biases from decay: two groups, the kernels and the biases.
ADAMW_GROUPS = [[42, 35, 5], [7, 5, 1]]


def padded_total(sizes, itemsize=4):
    """The elements of one group's flat buffer: each variable starts 64 bytes aligned, the
    zeros in between belong to the blocks too (tfring/_training/sharded_state.py, ALIGN_BYTES)."""
    align = 64 // itemsize
    return sum(-(-n // align) * align for n in sizes)


PADDED_TOTAL = padded_total(SIZES)


def block_length(total, rank, size):
    """A rank's share of `total` elements: split as evenly as can be, the first ranks taking
    one element more (as reducescatter splits rows)."""
    return total // size + (1 if rank < total % size else 0)


def block_size(rank, size):
    """The elements of this rank's block of the model's one float32 group."""
    return block_length(PADDED_TOTAL, rank, size)


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
    """model.fit sharded against model.fit unsharded (each rank its own data): the same
    weights, the same on every rank after every step, and the state a block."""
    initial = _flat(_model(k).get_weights())
    plain_model = _fit(make_optimizer, False, k=k, **options)
    steps = []
    sharded_model = _fit(make_optimizer, True, k=k, steps=steps, **options)
    plain, sharded = _flat(plain_model.get_weights()), _flat(sharded_model.get_weights())
    assert np.abs(plain - initial).max() > 1e-3, "training did not move the weights"
    np.testing.assert_allclose(sharded, plain, rtol=rtol, atol=atol)
    assert len(steps) == STEPS
    _assert_same_on_every_rank(np.concatenate(steps))  # after every step, not only the last
    assert_state_is_a_block(plain_model.optimizer, sharded_model.optimizer)


def numpy_dtype(variable):
    return np.dtype(tf.as_dtype(variable.dtype).as_numpy_dtype)


def rank_gradients(variables, rank, steps=STEPS, scale=1.0):
    """Rank `rank`'s gradients of `variables` at each of `steps` steps, in each variable's
    dtype: seeded by the rank alone, so that every rank can compute every rank's."""
    rng = np.random.default_rng([7, rank])
    return [[(scale * rng.normal(scale=0.5, size=tuple(v.shape))).astype(numpy_dtype(v))
             for v in variables] for _ in range(steps)]


def mean_gradients(variables, size, steps=STEPS, scale=1.0):
    """What the reduction must give the optimizer: the average of every rank's gradients,
    in float64, rounded once to each variable's dtype."""
    ranks = [rank_gradients(variables, r, steps, scale) for r in range(size)]
    return [[np.mean([g[s][j].astype(np.float64) for g in ranks], axis=0)
             .astype(numpy_dtype(v)) for j, v in enumerate(variables)] for s in range(steps)]


def keras3_apply(optimizer, grads, variables):
    optimizer.apply(grads, variables)


def tf_keras_apply(optimizer, grads, variables):
    optimizer.apply_gradients(zip(grads, variables))  # returns an op unsharded (legacy)


def build_optimizer(optimizer, variables):
    """Makes the optimizer's variables before any step is traced: build(), or
    _create_all_weights() (tf_keras.optimizers.legacy, which has no build)."""
    if hasattr(optimizer, "build"):
        optimizer.build(variables)
    else:
        optimizer._create_all_weights(variables)


def apply_steps(optimizer, variables, grads_by_step, apply=keras3_apply, jit_compile=False):
    """Applies each step's gradients (numpy) with one tf.function, traced once; returns the
    flat weights after each step, and the function."""
    @tf.function(jit_compile=jit_compile)
    def step(grads):
        apply(optimizer, grads, variables)

    weights = []
    for grads in grads_by_step:
        step([tf.constant(g) for g in grads])
        weights.append(_flat([v.numpy() for v in variables]))
    return weights, step


def check_apply_equals_unsharded(make_optimizer, k=keras, apply=keras3_apply, steps=STEPS,
                                 passes=1, groups=None, grad_scale=1.0, rtol=1e-5, atol=1e-6,
                                 jit_compile=False, **options):
    """`steps` applies of the sharded optimizer (each rank its own gradients, times
    `grad_scale`) against make_optimizer() without tfring, given the average of every rank's
    gradients: what unsharded data-parallel training applies. With `passes` > 1
    (backward_passes_per_step), the plain optimizer is given the sum of each `passes`
    passes' averages, once: the weights must stay put in between (make_optimizer's update
    must not depend on its step count, which tfring's tf_keras wrapper counts per pass).
    Checks the weights after every step, the same on every rank, and that each rank holds
    its block of the state only; returns (sharded optimizer, plain optimizer, the sharded
    traced step)."""
    rank, size = tfring.rank(), tfring.size()
    initial = _flat(_model(k).get_weights())
    model = _model(k)
    if passes > 1:
        options["backward_passes_per_step"] = passes
    sharded = tk.DistributedOptimizer(make_optimizer(), shard_optimizer_state=True, **options)
    build_optimizer(sharded, model.trainable_variables)
    got, step = apply_steps(sharded, model.trainable_variables,
                            rank_gradients(model.trainable_variables, rank, steps, grad_scale),
                            apply, jit_compile)
    variables = _model(k).trainable_variables
    averaged = mean_gradients(variables, size, steps, grad_scale)
    summed = [[sum(g[j].astype(np.float64) for g in averaged[u:u + passes])
               .astype(averaged[0][j].dtype) for j in range(len(variables))]
              for u in range(0, steps - passes + 1, passes)]
    plain = make_optimizer()
    build_optimizer(plain, variables)
    updates, _ = apply_steps(plain, variables, summed, apply, jit_compile)
    assert np.abs(updates[-1] - initial).max() > 1e-3, "the steps did not move the weights"
    for s, weights in enumerate(got):
        done = (s + 1) // passes  # updates applied after s + 1 passes
        np.testing.assert_allclose(weights, updates[done - 1] if done else initial, rtol=rtol,
                                   atol=atol, err_msg=f"after step {s + 1}")
    _assert_same_on_every_rank(np.concatenate(got))
    assert_state_is_a_block(plain, sharded, groups)
    return sharded, plain, step


def state_elements(optimizer):
    """The elements of an optimizer's state: its slots, the scalars (step counters, the
    learning rate, a loss scale) aside. A slot of the model's one-element bias counts."""
    variables = optimizer.variables
    variables = variables() if callable(variables) else variables  # tf_keras's legacy
    return sum(int(np.prod(v.shape)) for v in variables if len(v.shape) > 0)


def assert_state_is_a_block(plain, sharded, groups=None):
    """Each rank holds exactly its block of each group (`groups`: the element counts of
    each group's variables; default one group of the whole model) for each slot of the
    unsharded state, no more: a silent fallback to unsharded state fails here."""
    rank, size = tfring.rank(), tfring.size()
    whole = state_elements(plain)
    slots = whole // sum(SIZES)  # Adam's two moments, SGD's momentum, ...
    assert slots > 0 and whole == slots * sum(SIZES), whole
    want = slots * sum(block_length(padded_total(g), rank, size) for g in (groups or [SIZES]))
    assert state_elements(sharded) == want, (state_elements(sharded), want, whole)


def check_one_reducescatter_and_one_grouped_allgather(step, optimizer, results):
    """AdamW's two groups: the traced sharded `step` holds one reducescatter and one grouped
    allgather, and `results` ({sharded: (weights, optimizer)}) agree with unsharded."""
    ops = [n.op for n in traced_nodes(step)]
    assert len(optimizer._sharded.update.layouts) == 2
    assert ops.count("TfringReducescatter") == 1, ops
    assert ops.count("TfringGroupedAllgather") == 1 and "TfringAllgather" not in ops, ops
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(results[True][0])
    assert_state_is_a_block(results[False][1], results[True][1], ADAMW_GROUPS)


def check_xla_step(make_optimizer, k=keras, groups=None, **kwargs):
    """Sharded apply in a function XLA compiles equals the plain optimizer under XLA; the
    compiled step sums every rank's blocks placed in the whole buffer (one grouped
    allreduce: an allgather has no XLA lowering), and keeps its one reducescatter."""
    _, _, step = check_apply_equals_unsharded(make_optimizer, k, groups=groups,
                                              jit_compile=True, **kwargs)
    ops = [n.op for n in traced_nodes(step, [tf.zeros(v.shape) for v in
                                             _model(k).trainable_variables])]
    assert ops.count("TfringReducescatter") == 1, ops
    assert ops.count("TfringGroupedAllreduce") == 1, ops
    assert "TfringGroupedAllgather" not in ops and "TfringAllgather" not in ops, ops


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
    """Norms small enough that every step clips (the gradients' norms are about 5 for the
    model, 0.3 to 3 per variable): a norm of a rank's block alone would scale differently."""
    return ([lambda: k.optimizers.Adam(0.01, global_clipnorm=0.05),
             lambda: k.optimizers.SGD(0.1, momentum=0.9, clipnorm=0.02),
             lambda: k.optimizers.SGD(0.1, momentum=0.9, clipvalue=0.005)],
            ["global-clipnorm", "clipnorm", "clipvalue"])


def sweep(k=keras):
    """pytest parameters of the apply sweep: (make_optimizer, groups) with ids."""
    makers, ids = optimizers(k)
    clipping, clipping_ids = clipping_optimizers(k)
    return [(make, ADAMW_GROUPS if name.startswith("adamw") else None)
            for make, name in zip(makers + clipping, ids + clipping_ids)], ids + clipping_ids


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


def check_accumulation_and_loss_scale(k, loss_scale_optimizer, apply, grad_scale,
                                      counted_passes):
    """backward_passes_per_step=3, six passes: two updates by the sums of three passes'
    averaged gradients (SGD with momentum: its update does not depend on the step count);
    `iterations` counts the updates (Keras 3) or, as Horovod's, every pass (tf_keras:
    counted_passes). A LossScaleOptimizer (loss_scale_optimizer(inner, initial_scale))
    against the plain one on the averaged gradients, given gradients scaled by `grad_scale`
    where its apply unscales them (Keras 3; a power of two: exact)."""
    sharded, _, _ = check_apply_equals_unsharded(
        lambda: k.optimizers.SGD(0.1, momentum=0.9), k, apply, steps=6, passes=3)
    assert int(sharded.iterations.numpy()) == (6 if counted_passes else 2)
    check_apply_equals_unsharded(
        lambda: loss_scale_optimizer(k.optimizers.SGD(0.1, momentum=0.9), 2.0 ** 10), k, apply,
        grad_scale=grad_scale)


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


def traced_nodes(function, *args):
    """The nodes of a traced tf.function's graph and of the functions it calls."""
    graph_def = function.get_concrete_function(*args).graph.as_graph_def()
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
