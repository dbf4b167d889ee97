"""DistributedGradientTape: N ranks at batch B train exactly like 1 process at batch N*B."""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _training import (assert_identical_across_ranks, global_batch, loss_fn, make_variables,
                       reference_weights, shard)

STEPS, LR = 4, 0.1


def train(rank, size, use_function, steps=STEPS, optimizer=None, **tape_options):
    # Ranks start from different weights; the broadcast before the first step makes them one.
    variables = make_variables(seed=1 if rank == 0 else 100 + rank)
    opt = optimizer or tf.keras.optimizers.SGD(LR)

    def step_fn(x, ids, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(variables, x, ids, y)
        tape = tfring.DistributedGradientTape(tape, **tape_options)
        grads = tape.gradient(loss, variables)
        tape.apply_gradients(opt, zip(grads, variables))
        return loss

    step = tf.function(step_fn) if use_function else step_fn
    # Horovod's pattern: broadcast the initial weights before training.
    tfring.broadcast_variables(variables, root_rank=0)
    passes = tape_options.get("backward_passes_per_step", 1)
    for s in range(steps * passes):
        step(*(tf.constant(a) for a in shard(global_batch(s, size), rank)))
    return [v.numpy() for v in variables]


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "function"])
def test_tape_matches_one_process_on_the_global_batch(rank, size, use_function):
    got = train(rank, size, use_function)
    assert_identical_across_ranks(got, "tape")
    for g, want in zip(got, reference_weights(STEPS, size, LR)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("options", [
    dict(sparse_as_dense=True),
    dict(groups=2),
    dict(gradient_predivide_factor=2.0),
    dict(op=tfring.Sum, gradient_predivide_factor=1.0),
], ids=["sparse_as_dense", "groups", "predivide", "sum"])
def test_tape_options(rank, size, options):
    got = train(rank, size, use_function=True, **options)
    assert_identical_across_ranks(got, "tape-options")
    # Sum adds the ranks' mean gradients: the same as a learning rate size times larger.
    want = (reference_weights(STEPS, size, LR * size) if options.get("op") == tfring.Sum
            else reference_weights(STEPS, size, LR))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def collective_ops(**tape_options):
    """The tfring ops a tf.function's DistributedGradientTape builds, as (type, number of
    inputs, prescale_factor)."""
    variables = make_variables(seed=1)

    @tf.function
    def grads(x, ids, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(variables, x, ids, y)
        return tfring.DistributedGradientTape(tape, **tape_options).gradient(loss, variables)

    graph = grads.get_concrete_function(tf.TensorSpec([None, 6]), tf.TensorSpec([None], tf.int64),
                                        tf.TensorSpec([None, 1])).graph
    return [(op.type, len(op.inputs),
             op.get_attr("prescale_factor") if "prescale_factor" in op.node_def.attr else None)
            for op in graph.get_operations() if op.type in ("TfringAllreduce",
                                                           "TfringGroupedAllreduce")]


def test_groups_and_predivide_reach_the_ops(rank, size):
    # Results alone cannot show these options at work (ignoring them gives the same
    # weights): the ops the tape builds do. 3 dense gradients (the embedding's is gathered).
    assert [(t, n) for t, n, _ in collective_ops()] == [("TfringAllreduce", 1)] * 3
    grouped = collective_ops(groups=2)
    assert sorted(n for t, n, _ in grouped) == [1, 2], grouped
    assert all(t == "TfringGroupedAllreduce" for t, _, _ in grouped), grouped
    # Horovod's definition: each rank's gradient divided by the factor before the sum.
    predivided = collective_ops(gradient_predivide_factor=2.0)
    assert len(predivided) == 3 and all(p == 0.5 for _, _, p in predivided), predivided


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "function"])
def test_tape_accumulation_equals_a_larger_batch(rank, size, use_function):
    # 2 passes per update, averaged (the embedding's sparse gradient goes into a dense sum):
    # the same as 1 process at a batch 2 * size times larger; the optimizer runs on update
    # steps only, so its iterations count applied steps.
    opt = tf.keras.optimizers.SGD(LR, momentum=0.5)
    got = train(rank, size, use_function, optimizer=opt, backward_passes_per_step=2,
                average_aggregated_gradients=True)
    assert int(opt.iterations) == STEPS
    assert_identical_across_ranks(got, "tape-accumulate")
    reference = make_variables(seed=1)
    ref_opt = tf.keras.optimizers.SGD(LR, momentum=0.5)
    for step in range(STEPS):
        micro = [global_batch(2 * step + p, size) for p in range(2)]
        x, ids, y = (np.concatenate(parts) for parts in zip(*micro))
        with tf.GradientTape() as tape:
            loss = loss_fn(reference, x, ids, y)
        ref_opt.apply_gradients(zip(tape.gradient(loss, reference), reference))
    for g, w in zip(got, reference):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_tape_fp16_compression_is_close(rank, size):
    got = train(rank, size, use_function=True, compression=tfring.Compression.fp16)
    assert_identical_across_ranks(got, "tape-fp16")
    for g, w in zip(got, reference_weights(STEPS, size, LR)):
        np.testing.assert_allclose(g, w, rtol=1e-2, atol=1e-3)


def test_sparse_gradient_is_gathered_not_densified(rank, size):
    embedding = tf.Variable(np.zeros((4, 2), np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(embedding, [rank % 4]) * (rank + 1.0))
    grad = tfring.DistributedGradientTape(tape).gradient(loss, embedding)
    assert isinstance(grad, tf.IndexedSlices)
    dense = tf.convert_to_tensor(grad).numpy()
    want = np.zeros((4, 2), np.float32)
    for r in range(size):
        want[r % 4] += (r + 1.0) / size
    np.testing.assert_allclose(dense, want, rtol=1e-6)


def test_none_gradients_stay_none(rank, size):
    used, unused = tf.Variable(1.0), tf.Variable(2.0)
    with tf.GradientTape() as tape:
        loss = used * 3.0
    grads = tfring.DistributedGradientTape(tape).gradient(loss, [used, unused])
    assert grads[1] is None
    assert grads[0].numpy() == 3.0


def test_bad_options_raise(rank, size):
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        tfring.DistributedGradientTape(tape, op=tfring.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="op must be"):
        tfring.DistributedGradientTape(tape, op=tfring.Max)
