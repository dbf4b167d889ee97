"""Jobs for tests/jobs/test_sharded_resume.py: a checkpoint of sharded optimizer state saved
at one number of ranks resumes at another.

    python _sharded_resume.py save DIR     # N ranks: an epoch sharded and one unsharded,
                                           # each saved by rank 0's ModelCheckpoint
    python _sharded_resume.py resume DIR   # M ranks: each file resumed sharded and not
    python _sharded_resume.py without DIR  # one process, tfring never imported: each file
                                           # loaded into a plain Keras Adam, and resumed
"""

import sys

import keras
import numpy as np


def model_and_optimizer(sharded):
    keras.utils.set_random_seed(3)
    x = keras.Input((6,))
    h = keras.layers.Dense(7, activation="tanh")(x)
    model = keras.Model(x, keras.layers.Dense(1)(h))
    adam = keras.optimizers.Adam(0.01)
    if sharded is None:  # plain Keras
        model.compile(optimizer=adam, loss="mse")
        return model
    import tfring.keras as tk
    model.compile(optimizer=tk.DistributedOptimizer(adam, shard_optimizer_state=sharded),
                  loss="mse")
    return model


def without_tfring(root):
    """Each file into a plain Keras optimizer: the same state, and an epoch from it ends
    with the same weights."""
    states, weights = {}, {}
    for saved in ("sharded", "plain"):
        model = model_and_optimizer(None)
        model.optimizer.build(model.trainable_variables)
        model.load_weights(f"{root}/{saved}.weights.h5")
        states[saved] = [v.numpy() for v in model.optimizer.variables]
        rng = np.random.default_rng(20)
        model.fit(rng.normal(size=(12, 6)).astype(np.float32),
                  rng.normal(size=(12, 1)).astype(np.float32), batch_size=4, epochs=1,
                  shuffle=False, verbose=0)
        weights[saved] = np.concatenate([w.ravel() for w in model.get_weights()])
    same_state = len(states["sharded"]) == len(states["plain"]) > 2 and all(
        np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(states["sharded"],
                                                                 states["plain"]))
    moved = any(np.abs(v).max() > 0 for v in states["sharded"][2:])
    same = np.allclose(weights["sharded"], weights["plain"], rtol=1e-5, atol=1e-6)
    print(f"without tfring: state as unsharded: {same_state and moved}, resumed alike: "
          f"{same}, tfring imported: {'tfring' in sys.modules}", flush=True)


def fit(model, path=None):
    import tfring
    import tfring.keras as tk
    rng = np.random.default_rng(20 + tfring.rank())  # each rank its own data
    x = rng.normal(size=(12, 6)).astype(np.float32)
    y = rng.normal(size=(12, 1)).astype(np.float32)
    callbacks = [tk.callbacks.BroadcastGlobalVariablesCallback(0)]
    if path and tfring.rank() == 0:
        callbacks.append(keras.callbacks.ModelCheckpoint(path, save_weights_only=True))
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    return np.concatenate([w.ravel() for w in model.get_weights()])


def main():
    mode, root = sys.argv[1], sys.argv[2]
    if mode == "without":
        without_tfring(root)
        return
    import tfring
    tfring.init()
    if mode == "save":
        for sharded in (True, False):
            fit(model_and_optimizer(sharded), f"{root}/{'sharded' if sharded else 'plain'}"
                                              ".weights.h5")
        print(f"rank {tfring.rank()}: saved at {tfring.size()} ranks", flush=True)
        return
    results = {}
    for saved in ("sharded", "plain"):
        for sharded in (True, False):
            model = model_and_optimizer(sharded)
            model.optimizer.build(model.trainable_variables)
            if tfring.rank() == 0:  # rank 0 alone loads; the broadcast callback spreads it
                model.load_weights(f"{root}/{saved}.weights.h5")
            results[(saved, sharded)] = fit(model)
    reference = results[("plain", False)]
    worst = max(float(np.max(np.abs(w - reference))) for w in results.values())
    same = all(np.allclose(w, reference, rtol=1e-5, atol=1e-6) for w in results.values())
    print(f"rank {tfring.rank()}: resumed at {tfring.size()} ranks, all four alike: {same} "
          f"(largest difference {worst:.2e})", flush=True)


if __name__ == "__main__":
    main()
