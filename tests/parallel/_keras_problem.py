"""A small deterministic Keras problem for the model.fit tests: every rank can build the whole
global data set, fit on its own shard, and recompute the one-process result on the global
batch. Works with Keras 3 and with tf_keras (whichever `keras` module is passed)."""

import numpy as np

import tfring

FEATURES, VOCAB, BATCH = 6, 12, 4  # BATCH: examples per rank per step


def global_data(steps, size, passes=1, seed=0):
    """(x, ids, y) for `steps` applied steps of size*passes*BATCH examples each."""
    rng = np.random.default_rng(seed)
    n = steps * passes * size * BATCH
    return (rng.normal(size=(n, FEATURES)).astype(np.float32),
            rng.integers(0, VOCAB, size=(n, 1)).astype(np.int32),
            rng.normal(size=(n, 1)).astype(np.float32))


def shard(data, rank, size):
    """Rank's rows: for every micro-batch of the global order, its own BATCH rows."""
    n = len(data[0])
    rows = np.concatenate([np.arange(start + rank * BATCH, start + (rank + 1) * BATCH)
                           for start in range(0, n, size * BATCH)])
    return tuple(a[rows] for a in data)


def make_model(keras, seed, embedding=False):
    """Dense (and, with embedding=True, an Embedding whose gradient is tf.IndexedSlices)."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(5, activation="tanh")(x_in)
    inputs = [x_in]
    if embedding:
        ids = keras.Input((1,), dtype="int32")
        embedded = keras.layers.Flatten()(keras.layers.Embedding(VOCAB, 3)(ids))
        hidden = keras.layers.Concatenate()([hidden, embedded])
        inputs.append(ids)
    out = keras.layers.Dense(1)(hidden)
    return keras.Model(inputs, out)


def fit_inputs(data, embedding):
    x, ids, y = data
    return ([x, ids] if embedding else x), y


def reference_weights(keras, optimizer, steps, size, passes=1, embedding=False, seed=1,
                      count_passes=False):
    """One process, the same initial weights, the whole global batch per applied step.
    count_passes: the optimizer's `iterations` counts every pass, as Horovod's accumulation
    on tf_keras does (the N - 1 passes that apply nothing before each update)."""
    model = make_model(keras, seed, embedding)
    model.compile(optimizer=optimizer, loss="mse")
    x, y = fit_inputs(global_data(steps, size, passes), embedding)
    callbacks = []
    if count_passes:
        callbacks.append(keras.callbacks.LambdaCallback(
            on_train_batch_begin=lambda batch, logs: optimizer.iterations.assign_add(passes - 1)))
    model.fit(x, y, batch_size=size * passes * BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=callbacks)
    return [w.numpy() for w in model.weights]


def fit_distributed(keras, rank, size, optimizer, passes=1, embedding=False, steps=4,
                    wrap=None, jit_compile=None, **options):
    """Fits with tfring on this rank's shard, starting from rank-dependent weights (the
    broadcast callback makes them rank 0's); returns (model, distributed optimizer).
    `wrap` makes the distributed optimizer (default tfring.keras.DistributedOptimizer);
    jit_compile goes to model.compile."""
    import tfring.keras as hvd

    model = make_model(keras, seed=1 if rank == 0 else 50 + rank, embedding=embedding)
    wrap = wrap or hvd.DistributedOptimizer
    opt = wrap(optimizer, backward_passes_per_step=passes, **options)
    extra = {} if jit_compile is None else {"jit_compile": jit_compile}
    model.compile(optimizer=opt, loss="mse", **extra)
    x, y = fit_inputs(shard(global_data(steps, size, passes), rank, size), embedding)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    return model, opt


def weights_and_optimizer_state(model):
    optimizer = model.optimizer
    variables = optimizer.variables
    variables = variables() if callable(variables) else variables
    return [np.asarray(w) for w in model.get_weights()] + [np.asarray(v) for v in variables]


def assert_same_on_all_ranks(arrays, label):
    for i, a in enumerate(arrays):
        root = tfring.broadcast_object(a, 0, name=f"{label}.{i}")
        np.testing.assert_array_equal(a, root, err_msg=f"{label}: array {i} differs from rank 0")
