"""Ranks never drift apart: unnamed ops pair correctly after retraces, extra graphs, calls
that fail on one rank before they are submitted, and collective errors; a drift between
ranks' unnamed eager calls is an error naming each rank's call, and the next ops pair."""

import time

import numpy as np
import pytest
import tensorflow as tf

import tfring


def _sum_of_ranks(size):
    return float(sum(range(size)))


def _check_pairing(rank, size, rounds=3):
    """Ordinary unnamed ops of every kind, checked against what every rank computes."""
    for i in range(rounds):
        got = tfring.allreduce(tf.constant([float(rank + i)]), op=tfring.Sum).numpy()
        np.testing.assert_array_equal(got, [_sum_of_ranks(size) + i * size])
        gathered = tfring.allgather(tf.fill([rank + 1], rank)).numpy()
        np.testing.assert_array_equal(gathered, np.repeat(np.arange(size), np.arange(size) + 1))
        root = (i + 1) % size
        np.testing.assert_array_equal(tfring.broadcast(tf.constant([rank, i]), root).numpy(),
                                      [root, i])
        a, b = tfring.grouped_allreduce([tf.constant([1.0]), tf.constant([rank], tf.int32)],
                                        op=tfring.Sum)
        assert a.numpy()[0] == size and b.numpy()[0] == sum(range(size))


def _local_failure(rank, case):
    """A call that fails on this rank only, before anything is submitted."""
    kind = case % 4
    if kind == 0:
        with pytest.raises(TypeError, match="dtype"):
            tfring.allreduce(tf.constant(["text"]))
    elif kind == 1:
        with pytest.raises(ValueError, match="scalar"):
            tfring.allgather(tf.constant(1.0))
    elif kind == 2:
        # Checked in the kernel, which fails it before it takes a name.
        with pytest.raises(tf.errors.InvalidArgumentError, match="splits"):
            tfring.alltoall(tf.zeros([4]), splits=[1, 1, 1, 1, 1, 1, 1][:rank + 5])
    else:
        with pytest.raises(ValueError, match="root_rank"):
            tfring.broadcast(tf.constant([1.0]), root_rank=-1)


def test_long_sequence_of_cases_with_local_failures_and_errors(rank, size):
    for case in range(30):
        # One rank (a different one each time) fails a call before submitting it.
        if rank == case % size:
            _local_failure(rank, case)
        if case % 5 == 4:
            # A collective error: ranks disagree on the shape. Every rank gets it.
            with pytest.raises(tf.errors.FailedPreconditionError, match="Mismatched shapes"):
                tfring.allreduce(tf.zeros([rank + 1]))
        _check_pairing(rank, size, rounds=1)


def test_drift_between_ranks_is_an_error_naming_each_call(rank, size):
    # Rank 0 leaves its loop one call early (a failed assertion, say); the others make one
    # more call, which pairs with rank 0's next, different call.
    calls = 2 if rank == 0 else 3
    errors = []
    for i in range(calls):
        try:
            tfring.allreduce(tf.constant([1.0, 2.0]), op=tfring.Sum)
        except tf.errors.FailedPreconditionError as e:
            errors.append(str(e))
    if rank == 0:
        try:
            tfring.allreduce(tf.constant([1, 2, 3], tf.int64), op=tfring.Sum)
        except tf.errors.FailedPreconditionError as e:
            errors.append(str(e))
    assert len(errors) == 1, errors
    message = errors[0]
    assert "Mismatched" in message and "drifted apart" in message
    assert message.count("test_drift.py:") == 2, message
    # Both sides used one name each: the next unnamed ops pair again.
    _check_pairing(rank, size)


def test_ranks_waiting_on_each_others_missing_calls_fail_within_seconds(rank, size):
    # Rank 0 makes one unnamed call more; the others go on to a named one. Nothing pairs:
    # rank 0 waits in its extra call, the others in theirs. Every rank's call fails within
    # seconds (the stall shutdown is 60 s in this suite, 600 s by default), naming both.
    start = time.time()
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="drifted apart and wait on each other: rank 0 waits in "
                             "allreduce 'unnamed.[0-9]+' \\(an unnamed call at test_drift.py"):
        if rank == 0:
            tfring.allreduce(tf.constant([1.0]), op=tfring.Sum)
        else:
            tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name="drift.named")
    assert time.time() - start < 20
    # Every rank numbers its next unnamed call past the failed one: they pair again.
    _check_pairing(rank, size)


def test_retrace_on_one_rank_only_keeps_pairing(rank, size):
    # A custom loop whose last batch is shorter on rank 0 only: only rank 0 retraces.
    @tf.function
    def step(batch):
        loss = tf.reduce_sum(batch)
        return tfring.allreduce(loss, op=tfring.Sum), tfring.allreduce(tf.shape(batch)[:1],
                                                                        op=tfring.Sum)

    batches = [4, 4, 4, 3 if rank == 0 else 4, 4]
    for i, n in enumerate(batches):
        total, rows = step(tf.fill([n], float(rank + 1)))
        want_rows = sum(batches_of(r, i) for r in range(size))
        assert rows.numpy()[0] == want_rows
        assert total.numpy() == sum((r + 1) * batches_of(r, i) for r in range(size))
    _check_pairing(rank, size)


def batches_of(r, i):
    return 3 if (r == 0 and i == 3) else 4


def test_tf1_graph_built_by_one_rank_only_changes_nothing(rank, size):
    if rank == 0:
        # An eval/export graph with a collective, built on rank 0 alone and never run.
        with tf.Graph().as_default():
            tfring.allreduce(tf.constant([0.0]) * 2.0)
            tfring.broadcast(tf.constant([0.0]), 0)
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        loss = tf.reduce_sum(w * float(rank + 1))
        logged = tfring.allreduce(loss, op=tfring.Sum)  # unnamed, for logging
        grad = tfring.allreduce(tf.gradients(loss, w)[0])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                got_loss, got_grad = session.run([logged, grad])
                assert got_loss == pytest.approx(3.0 * sum(r + 1 for r in range(size)))
                np.testing.assert_allclose(got_grad, [np.mean(np.arange(1, size + 1))] * 2)
    _check_pairing(rank, size)


def test_threads_with_names_still_pair_by_name(rank, size):
    import threading
    results = {}

    def work(tag):
        results[tag] = tfring.allreduce(tf.constant([float(rank)]), op=tfring.Sum,
                                        name=f"drift.thread.{tag}").numpy()[0]

    order = ["a", "b", "c"] if rank % 2 == 0 else ["c", "b", "a"]
    threads = [threading.Thread(target=work, args=(t,)) for t in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {t: _sum_of_ranks(size) for t in "abc"}


def test_keras_layers_numbered_differently_on_one_rank_still_pair(rank, size):
    # Keras numbers layers per process: rank 0 made extra layers first (an eval model, say),
    # so its "dense_N" differ from the others'. Unnamed allreduces of the gradients inside
    # tf.function still pair, because their names leave those numbers out.
    import keras
    for _ in range(3 if rank == 0 else 0):
        keras.layers.Dense(1)
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3), keras.layers.Dense(1)])

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x))
        return [tfring.allreduce(g, op=tfring.Sum)
                for g in tape.gradient(loss, model.trainable_variables)]

    got = step(tf.fill([1, 2], float(rank + 1)))

    def plain_gradients(r):  # rank r's, which every rank can compute (the same weights)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(tf.fill([1, 2], float(r + 1))))
        return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]

    everyone = [plain_gradients(r) for r in range(size)]
    for i, g in enumerate(got):
        np.testing.assert_allclose(g.numpy(), np.sum([grads[i] for grads in everyone], axis=0),
                                   rtol=1e-6)
