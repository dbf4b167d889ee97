"""Gradients that stay local (Horovod's local variables and Partial wrappers), gradients
reduced within a process set, and the tape as a context manager; all against each rank's
plain gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd


def _model(seed):
    keras.utils.set_random_seed(seed)
    shared = keras.layers.Dense(3, name="shared")
    local = keras.layers.Dense(1, name="local")
    model = keras.Sequential([keras.Input((4,)), shared, local])
    return model, shared, local


def _data(rank):
    rng = np.random.default_rng(100 + rank)
    return (rng.normal(size=(5, 4)).astype(np.float32),
            rng.normal(size=(5, 1)).astype(np.float32))


def _plain_gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def _plain_and_distributed(model, x, y, wrap):
    def loss_fn():
        return tf.reduce_mean(tf.square(model(x) - y))
    with tf.GradientTape() as plain:
        loss = loss_fn()
    plain_grads = plain.gradient(loss, model.trainable_variables)
    with tf.GradientTape() as tape:
        loss = loss_fn()
    return plain_grads, wrap(tape).gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("scale", [True, False])
def test_partial_tape_leaves_local_layers_alone(scale, rank, size):
    model, shared, local = _model(seed=1)
    x, y = _data(rank)
    plain, got = _plain_and_distributed(model, x, y, lambda tape: (
        tfring.PartialDistributedGradientTape(tape, local_layers=[local],
                                              scale_local_gradients=scale)))
    # Every rank has the same weights, so each computes every rank's plain gradients itself.
    everyone = [_plain_gradients(model, *_data(r)) for r in range(size)]
    for i, (v, p, g) in enumerate(zip(model.trainable_variables, plain, got)):
        if any(v is w for w in local.trainable_weights):
            want = p.numpy() / size if scale else p.numpy()
        else:
            want = np.mean([grads[i] for grads in everyone], axis=0)
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)


def test_local_and_global_gradients_split_by_source(rank, size):
    # Horovod's get_local_and_global_gradients: gradient()'s results as two lists of
    # (source, gradient) pairs, the local layer's sources first, each in the sources' order.
    model, shared, local = _model(seed=1)
    x, y = _data(rank)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = tfring.PartialDistributedGradientTape(tape, local_layers=[local])
    local_pairs, global_pairs = tape.get_local_and_global_gradients(
        loss, model.trainable_variables)
    assert [s for s, _ in local_pairs] == list(local.trainable_weights)
    assert [s for s, _ in global_pairs] == list(shared.trainable_weights)
    plain = dict(zip((id(v) for v in model.trainable_variables), _plain_gradients(model, x, y)))
    everyone = [_plain_gradients(model, *_data(r)) for r in range(size)]
    for source, grad in local_pairs:  # this rank's own, divided by the size
        np.testing.assert_allclose(grad.numpy(), plain[id(source)] / size, rtol=1e-5)
    for i, (source, grad) in enumerate(global_pairs):  # the shared layer comes first
        np.testing.assert_allclose(grad.numpy(), np.mean([g[i] for g in everyone], axis=0),
                                   rtol=1e-5, atol=1e-6)


def test_register_local_source_and_context_manager(rank, size):
    w = tf.Variable([float(rank + 1)])
    v = tf.Variable([2.0])
    with tfring.DistributedGradientTape(tf.GradientTape()) as tape:  # Horovod-style `with`
        loss = tf.reduce_sum(w * v * float(rank + 1))
    tape.register_local_source(w)
    gw, gv = tape.gradient(loss, [w, v])
    np.testing.assert_allclose(gw.numpy(), [2.0 * (rank + 1) / size])
    mean_gv = np.mean([(r + 1) ** 2 for r in range(size)])
    np.testing.assert_allclose(gv.numpy(), [mean_gv])


def test_tape_reduces_within_its_process_set(rank, size):
    # Every rank runs the same code, as in Horovod's test: members get the set's mean, a
    # rank outside the set keeps its own gradient.
    members = tfring.ProcessSet([0, 1])
    w = tf.Variable([1.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(rank + 1))
    grad = tfring.DistributedGradientTape(tape, process_set=members).gradient(loss, w)
    want = 1.5 if rank in members.ranks else rank + 1.0  # 1.5: the mean of 1 and 2
    np.testing.assert_allclose(grad.numpy(), [want])


def test_tf1_optimizer_outside_its_process_set_keeps_local_gradients(rank, size):
    members = tfring.ProcessSet([0, 1])
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([0.0]), use_resource=True)
        opt = tfring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                          process_set=members)
        train_op = opt.minimize(tf.reduce_sum(w * float(rank + 1)))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train_op)
            want = -1.5 if rank in members.ranks else -(rank + 1.0)
            np.testing.assert_allclose(session.run(w), [want])


def test_tf1_optimizer_register_local_var(rank, size):
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=[1.0])
        v = tf.compat.v1.get_variable("v", initializer=[1.0])
        loss = tf.reduce_sum((w + v) * float(rank + 1))
        opt = tfring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        opt.register_local_var(w)
        grads = dict((var.name, g) for g, var in opt.compute_gradients(loss, [w, v]))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            gw, gv = session.run([grads["w:0"], grads["v:0"]])
    np.testing.assert_allclose(gw, [(rank + 1) / size])
    np.testing.assert_allclose(gv, [np.mean(np.arange(1, size + 1))])


def test_keras_partial_optimizer_keeps_local_layers_local_in_fit(rank, size):
    model, shared, local = _model(seed=1 if rank == 0 else 7 + rank)
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=local)
    model.compile(optimizer=opt, loss="mse")
    x, y = _data(rank)
    model.fit(x, y, batch_size=5, epochs=2, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(
            0, local_variables=local.trainable_weights)])
    gathered = [tfring.allgather_object(np.asarray(w)) for w in shared.weights]
    for per_rank in gathered:
        for other in per_rank[1:]:
            np.testing.assert_array_equal(other, per_rank[0])  # the shared layer: identical
    kernels = tfring.allgather_object(np.asarray(local.kernel))
    assert all(not np.array_equal(kernels[0], k) for k in kernels[1:])  # each rank its own
