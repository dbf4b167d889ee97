"""The smoke test `make compat` runs on 2 ranks in each TensorFlow's environment.

    mpirun -np 2 python tools/compat_smoke.py

It checks, against numpy: an eager allreduce, a grouped allreduce in a tf.function, an
allreduce and a variable broadcast in a TF1 graph session, and a Keras 3 `model.fit` with
tfring's DistributedOptimizer and Horovod's three usual callbacks, ending with identical
weights on every rank; then every probe of the adapters' hooks (tfring/_adapters: the
private Keras 3 and TensorFlow names tfring uses, and tf_keras's where it is installed), so
that a release that lacks one fails here, naming it. Rank 0 prints `compat smoke: ok` at the
end; any failure raises.
It needs nothing but tfring, TensorFlow, Keras and numpy (the data is made up here).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring  # noqa: E402
import tfring.keras as hvd_keras  # noqa: E402


def rank_values(rank, shape):
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1) * (rank + 1)


def check_collectives(rank, size):
    ranks_sum = sum(r + 1 for r in range(size))
    x = rank_values(rank, [3, 4])
    total = tfring.allreduce(tf.constant(x), op=tfring.Sum)
    np.testing.assert_allclose(total.numpy(), x / (rank + 1) * ranks_sum)

    @tf.function
    def grouped(a, b):
        return tfring.grouped_allreduce([a, b], op=tfring.Average)

    a, b = rank_values(rank, [5]), rank_values(rank, [2, 2])
    mean_a, mean_b = grouped(tf.constant(a), tf.constant(b))
    np.testing.assert_allclose(mean_a.numpy(), a / (rank + 1) * ranks_sum / size, rtol=1e-6)
    np.testing.assert_allclose(mean_b.numpy(), b / (rank + 1) * ranks_sum / size, rtol=1e-6)

    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.constant(rank_values(rank, [4])))
        reduced = tfring.allreduce(tf.constant(x), op=tfring.Sum)
        bcast = tfring.broadcast_global_variables(0)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            np.testing.assert_allclose(session.run(reduced), x / (rank + 1) * ranks_sum)
            session.run(bcast)
            np.testing.assert_allclose(session.run(v), rank_values(0, [4]))


def check_keras_fit(rank, size):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(256, 16)).astype(np.float32)
    y = (x[:, :4].sum(axis=1) > 0).astype(np.int64)
    x, y = x[rank::size], y[rank::size]
    keras.utils.set_random_seed(100 + rank)  # different on purpose: the broadcast fixes it
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(2)])
    lr = 0.05 * size
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd_keras.callbacks.MetricAverageCallback(),
                 hvd_keras.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=1)]
    history = model.fit(x, y, batch_size=16, epochs=3, callbacks=callbacks, verbose=0)
    losses = history.history["loss"]
    if not losses[-1] < losses[0]:
        raise AssertionError(f"the loss did not go down: {losses}")
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_array_equal(w, hvd_keras.broadcast(w, 0, name=f"weights.{i}"))
    return losses


def check_adapters():
    """Every hook's probe passes in this environment (tfring/_adapters/_hooks.py)."""
    import importlib.util

    from tfring._adapters import keras3, tf_internals, tf_keras

    adapters = [keras3, tf_internals]
    if importlib.util.find_spec("tf_keras") is not None:
        adapters.append(tf_keras)
    missing, handled = [], []
    for adapter in adapters:
        for hook in adapter.HOOKS:
            problem = hook.probe()
            if problem:
                line = f"{adapter.__name__.split('.')[-1]}: {hook.name}: {problem}"
                (handled if hook.when_missing else missing).append(
                    line + (f" ({hook.when_missing})" if hook.when_missing else ""))
    if missing:
        raise RuntimeError("hooks this release lacks:\n  " + "\n  ".join(missing))
    if handled and tfring.rank() == 0:
        print("compat smoke: hooks this release lacks, whose features tfring refuses here: " +
              "; ".join(handled), flush=True)
    return sum(len(a.HOOKS) for a in adapters) - len(handled)


def main():
    tfring.init()
    rank, size = tfring.rank(), tfring.size()
    check_collectives(rank, size)
    losses = check_keras_fit(rank, size)
    hooks = check_adapters()
    if rank == 0:
        print(f"compat smoke: ok (TensorFlow {tf.__version__}, Keras {keras.__version__}, "
              f"{size} ranks, loss {losses[0]:.3f} -> {losses[-1]:.3f}, {hooks} hooks' probes "
              "passed)", flush=True)
    tfring.shutdown()


if __name__ == "__main__":
    main()
