"""TF1 graphs: DistributedOptimizer + BroadcastGlobalVariablesHook in a MonitoredTrainingSession
train N ranks at batch B exactly like 1 process at batch N*B, from rank 0's initial weights."""

import os

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _training import (assert_identical_across_ranks, global_batch, initial_values, loss_fn,
                       reference_weights, shard)

STEPS, LR = 4, 0.1
v1 = tf.compat.v1


class FetchAtEnd(v1.train.SessionRunHook):
    """Reads the variables when the session ends (run() is refused once should_stop)."""

    def __init__(self, variables):
        self.variables, self.values = variables, None

    def end(self, session):
        self.values = session.run(self.variables)


def build(rank, seed, optimizer_options=None):
    """The model as TF1 variables with rank-dependent initial values (rank 0: `seed`)."""
    values = initial_values(seed if rank == 0 else 100 + rank)
    variables = [v1.get_variable(n, initializer=tf.constant(v), use_resource=True)
                 for n, v in zip(("w1", "b1", "embedding", "w2"), values)]
    x = v1.placeholder(tf.float32, [None, 6])
    ids = v1.placeholder(tf.int64, [None])
    y = v1.placeholder(tf.float32, [None, 1])
    loss = loss_fn(variables, x, ids, y)
    global_step = v1.train.get_or_create_global_step()
    opt = tfring.DistributedOptimizer(v1.train.GradientDescentOptimizer(LR),
                                      **(optimizer_options or {}))
    train_op = opt.minimize(loss, global_step=global_step, var_list=variables)
    return variables, (x, ids, y), train_op, global_step


@pytest.mark.parametrize("options", [{}, dict(sparse_as_dense=True)], ids=["sparse", "dense"])
def test_monitored_session_matches_one_process(rank, size, options):
    with tf.Graph().as_default():
        variables, feeds, train_op, _ = build(rank, seed=1, optimizer_options=options)
        fetch = FetchAtEnd(variables)
        hooks = [tfring.BroadcastGlobalVariablesHook(0),
                 v1.train.StopAtStepHook(last_step=STEPS), fetch]
        with v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
            step = 0
            while not sess.should_stop():
                batch = shard(global_batch(step, size), rank)
                sess.run(train_op, feed_dict=dict(zip(feeds, batch)))
                step += 1
        got = fetch.values
    assert step == STEPS
    assert_identical_across_ranks(got, "tf1")
    for g, want in zip(got, reference_weights(STEPS, size, LR)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_checkpoint_on_rank_0_then_resume(rank, size, shared_tmp_path):
    # Train 2 steps with a checkpoint written by rank 0 only, then resume in a new session:
    # rank 0 restores, the hook broadcasts, and training continues from step 2 to STEPS.
    directory = shared_tmp_path
    for last_step in (2, STEPS):
        with tf.Graph().as_default():
            variables, feeds, train_op, global_step = build(rank, seed=1)
            fetch = FetchAtEnd(variables)
            hooks = [tfring.BroadcastGlobalVariablesHook(0),
                     v1.train.StopAtStepHook(last_step=last_step), fetch]
            with v1.train.MonitoredTrainingSession(
                    checkpoint_dir=directory if rank == 0 else None, hooks=hooks,
                    save_checkpoint_steps=1, save_summaries_steps=None,
                    save_summaries_secs=None, log_step_count_steps=None) as sess:
                start = sess.run(global_step)
                step = start
                while not sess.should_stop():
                    batch = shard(global_batch(step, size), rank)
                    sess.run(train_op, feed_dict=dict(zip(feeds, batch)))
                    step += 1
            got = fetch.values
        assert start == (0 if last_step == 2 else 2), start
        assert step == last_step
    assert_identical_across_ranks(got, "tf1-resume")
    for g, want in zip(got, reference_weights(STEPS, size, LR)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    if rank == 0:
        assert any(name.startswith("model.ckpt") for name in os.listdir(directory))


def test_broadcast_global_variables_op(rank, size):
    with tf.Graph().as_default():
        v = v1.get_variable("v", initializer=tf.constant([float(rank)] * 3), use_resource=True)
        bcast = tfring.broadcast_global_variables(size - 1)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(bcast)
            np.testing.assert_array_equal(sess.run(v), [float(size - 1)] * 3)


@pytest.mark.parametrize("sparse_as_dense", [False, True], ids=["sparse", "dense"])
def test_accumulation_applies_every_second_run(rank, size, sparse_as_dense):
    # 2 runs per applied step, averaged: 1 process at a batch 2 * size times larger.
    # global_step counts applied steps, so StopAtStepHook stops after 2 * STEPS runs.
    options = dict(backward_passes_per_step=2, average_aggregated_gradients=True,
                   sparse_as_dense=sparse_as_dense)
    with tf.Graph().as_default():
        variables, feeds, train_op, global_step = build(rank, seed=1, optimizer_options=options)
        fetch = FetchAtEnd(variables)
        hooks = [tfring.BroadcastGlobalVariablesHook(0),
                 v1.train.StopAtStepHook(last_step=STEPS), fetch]
        runs = 0
        with v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
            while not sess.should_stop():
                batch = shard(global_batch(runs, size), rank)
                sess.run(train_op, feed_dict=dict(zip(feeds, batch)))
                runs += 1
        got = fetch.values
    assert runs == 2 * STEPS
    assert_identical_across_ranks(got, "tf1-accumulate")
    for g, want in zip(got, reference_weights(STEPS, size, LR, passes=2)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("passes", [1, 2])
def test_initializer_built_before_minimize(rank, size, passes):
    # Horovod's TF1 synthetic benchmark's order: the optimizer, then the initializer (run in
    # a plain Session), then minimize(). State the wrapper makes in minimize() (the sums of
    # backward_passes_per_step) initializes itself on the first run.
    with tf.Graph().as_default():
        values = initial_values(1)
        variables = [v1.get_variable(n, initializer=tf.constant(v), use_resource=True)
                     for n, v in zip(("w1", "b1", "embedding", "w2"), values)]
        feeds = (v1.placeholder(tf.float32, [None, 6]), v1.placeholder(tf.int64, [None]),
                 v1.placeholder(tf.float32, [None, 1]))
        opt = tfring.DistributedOptimizer(v1.train.GradientDescentOptimizer(LR),
                                          backward_passes_per_step=passes,
                                          average_aggregated_gradients=True)
        init = v1.global_variables_initializer()
        with v1.Session() as session:
            session.run(init)
            train_op = opt.minimize(loss_fn(variables, *feeds), var_list=variables)
            for run_index in range(passes * STEPS):
                batch = shard(global_batch(run_index, size), rank)
                session.run(train_op, feed_dict=dict(zip(feeds, batch)))
            got = session.run(variables)
    assert_identical_across_ranks(got, f"tf1-init-first-{passes}")
    for g, want in zip(got, reference_weights(STEPS, size, LR, passes=passes)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_accumulation_apply_needs_compute_first(rank, size):
    with tf.Graph().as_default():
        v = v1.get_variable("v", initializer=tf.constant([1.0]), use_resource=True)
        opt = tfring.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1),
                                          backward_passes_per_step=2)
        with pytest.raises(ValueError, match="call compute_gradients"):
            opt.apply_gradients([(tf.constant([1.0]), v)])
