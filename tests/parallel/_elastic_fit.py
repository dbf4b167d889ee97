"""The elastic Keras state and callbacks with no worker lost, for Keras 3
(test_elastic_state.py) and tf_keras (test_tf_keras.py): `tf.keras` is whichever the process
runs. What a lost or joining worker does to them is in tests/failure (elastic_scenarios.py)."""

import numpy as np
import tensorflow as tf

import tfring


def check_elastic_callbacks(hvd, rank, size):
    keras = tf.keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    commits = []
    commit = state.commit

    def counted_commit():
        commits.append((state.epoch, state.batch))
        commit()

    state.commit = counted_commit
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(state.batch)

    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=2),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state), Record()]
    x = np.random.default_rng(rank).normal(size=(20, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)

    @hvd.elastic.run
    def train(state, epochs):
        model.fit(x, y, batch_size=4, epochs=epochs - state.epoch, shuffle=False, verbose=0,
                  callbacks=callbacks)

    train(state, 2)
    # Every 2nd batch of the 10 (the count runs on across epochs), and every epoch's end.
    assert len(commits) == 5 + 2, commits
    assert seen == [0, 1, 2, 3, 4] * 2, seen
    assert (state.epoch, state.batch) == (2, 0)
    # A later call goes on from the epochs done: one more epoch for 3 in all.
    train(state, 3)
    assert (state.epoch, state.batch) == (3, 0) and seen == [0, 1, 2, 3, 4] * 3, seen
    trained = [w.numpy().copy() for w in model.weights]
    for w in model.trainable_weights:
        w.assign(tf.zeros_like(w))
    state.restore()  # the last commit came at the last epoch's end
    for got, want in zip(model.weights, trained):
        np.testing.assert_array_equal(got.numpy(), want)
    everyone = hvd.allgather(tf.concat([tf.reshape(w, [-1]) for w in model.trainable_weights],
                                       0)[tf.newaxis]).numpy()
    assert all(np.array_equal(everyone[0], everyone[r]) for r in range(size))


def check_sync_gives_a_joiner_the_optimizer_state(hvd, rank):
    """A worker that has just joined has not built its optimizer; the others have (rank 0
    here took a step, with momentum). The sync must build it and give it rank 0's values,
    or the broadcast would pair different variable lists."""
    keras = tf.keras
    tf.random.set_seed(rank)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1, momentum=0.9)
    if rank == 0:  # a local step: no collective
        grads = [tf.ones_like(v) for v in model.trainable_variables]
        opt.apply_gradients(zip(grads, model.trainable_variables))
    state = hvd.elastic.KerasState(model, opt, batch=rank)
    state.sync()
    values = [v.numpy() for v in list(model.variables) + list(opt.variables)]
    root = tfring.broadcast_object(values, root_rank=0)
    assert len(values) == len(root) > len(model.variables)
    for mine, want in zip(values, root):
        np.testing.assert_array_equal(mine, want)
    assert int(opt.iterations.numpy()) == 1 and state.batch == 0
