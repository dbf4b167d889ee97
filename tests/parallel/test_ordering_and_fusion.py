"""Tensors are matched by name whatever order ranks submit them in; fusion keeps results."""

import threading

import numpy as np
import tensorflow as tf

import tfring

N = 20


def value(i, r):
    return np.arange(4, dtype=np.float32) + 100.0 * i + r


def test_different_submission_order_in_one_function(rank, size):
    # Control dependencies between the inputs force each rank's submission order: ascending
    # on even ranks, descending on odd ones. (Chaining on the outputs instead would make
    # each allreduce wait for the previous one to finish: a real deadlock, as in MPI.)
    # Names pair the tensors; the order of execution is rank 0's decision.
    order = list(range(N)) if rank % 2 == 0 else list(reversed(range(N)))

    @tf.function
    def step():
        inputs, previous = {}, None
        for i in order:
            with tf.control_dependencies([previous] if previous is not None else []):
                inputs[i] = tf.identity(tf.constant(value(i, rank)))
            previous = inputs[i]
        return [tfring.allreduce(inputs[i], op=tfring.Sum, name=f"ordered.{i}")
                for i in range(N)]

    for _ in range(3):  # the first step negotiates; later ones hit the response cache
        got = step()
        for i in range(N):
            want = sum(value(i, r) for r in range(size))
            np.testing.assert_array_equal(got[i].numpy(), want)


def test_collectives_created_in_different_orders_in_one_function(rank, size):
    # The program order of the allreduces differs by rank. tf.function's automatic control
    # dependencies would chain them in that order and deadlock (each rank waiting for a
    # different first tensor); tfring exempts its ops from that chaining
    # (tfring/_process/autodeps.py).
    order = list(range(N)) if rank % 2 == 0 else list(reversed(range(N)))

    @tf.function
    def step():
        out = {i: tfring.allreduce(tf.constant(value(i, rank)), op=tfring.Sum,
                                   name=f"created.{i}") for i in order}
        return [out[i] for i in range(N)]

    for _ in range(2):
        got = step()
        for i in range(N):
            np.testing.assert_array_equal(got[i].numpy(), sum(value(i, r) for r in range(size)))


def test_threads_submitting_in_different_orders(rank, size):
    # Two threads per rank, each submitting named eager allreduces; which thread goes first
    # differs by rank. Horovod's eager mode pairs these by submission order and gets wrong
    # sums; tfring pairs them by name.
    results = {}
    errors = []

    def worker(prefix, count):
        try:
            for i in range(count):
                x = tf.constant([float(i + 1000 * (prefix == "b")) + rank])
                results[(prefix, i)] = tfring.allreduce(x, op=tfring.Sum,
                                                        name=f"thread.{prefix}.{i}").numpy()
        except Exception as e:  # reported below, on this rank
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(p, 10)) for p in ("a", "b")]
    if rank % 2:
        threads.reverse()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for (prefix, i), got in results.items():
        base = float(i + 1000 * (prefix == "b"))
        assert got[0] == base * size + sum(range(size)), (prefix, i)
    assert len(results) == 20


def test_many_small_tensors_fused_equal_one_at_a_time(rank, size):
    rng = np.random.default_rng(rank)
    inputs = [rng.normal(size=(64,)).astype(np.float32) for _ in range(100)]

    @tf.function
    def fused():
        return [tfring.allreduce(tf.constant(x), op=tfring.Sum, name=f"fused.{i}")
                for i, x in enumerate(inputs)]

    together = [t.numpy() for t in fused()]
    alone = [tfring.allreduce(tf.constant(x), op=tfring.Sum, name=f"alone.{i}").numpy()
             for i, x in enumerate(inputs)]
    # Fused and lone reductions may add in a different order (MPI picks its algorithm by
    # message size), so they agree to rounding; every rank must get the same bits, though.
    gathered = tfring.allgather(tf.constant(np.stack(together)[None]), name="fused.check")
    for r in range(size):
        np.testing.assert_array_equal(gathered[r].numpy(), np.stack(together))
    for i in range(100):
        np.testing.assert_allclose(together[i], alone[i], rtol=1e-6, atol=1e-6)
        want = sum(np.random.default_rng(r).normal(size=(100, 64)).astype(np.float32)[i]
                   for r in range(size))
        np.testing.assert_allclose(together[i], want, rtol=1e-5, atol=1e-5)


def test_mixed_collectives_in_one_step(rank, size):
    @tf.function
    def step():
        outs = []
        for i in range(10):
            outs.append(tfring.allreduce(tf.fill([3], float(i + rank)), op=tfring.Sum))
            outs.append(tfring.allgather(tf.fill([rank + 1], i)))
            outs.append(tfring.broadcast(tf.fill([2], i * 10 + rank), root_rank=i % size))
        return outs

    outs = step()
    for i in range(10):
        np.testing.assert_array_equal(outs[3 * i].numpy(), [i * size + sum(range(size))] * 3)
        np.testing.assert_array_equal(outs[3 * i + 1].numpy(),
                                      np.concatenate([[i] * (r + 1) for r in range(size)]))
        np.testing.assert_array_equal(outs[3 * i + 2].numpy(), [i * 10 + i % size] * 2)
