"""Jobs for tests/jobs/test_sharded_resume.py: a checkpoint of sharded optimizer state saved
at one number of ranks resumes at another. Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1.

    mpirun -np 3 python _sharded_resume.py chain DIR [back]
        one job of three processes, three tfring jobs in turn (init, shutdown, init again):
        world ranks 0 and 1 as a job of 2 (init(comm=[0, 1])) fit an epoch sharded and one
        unsharded, each saved by rank 0's ModelCheckpoint into DIR/at2; all three resume
        each file sharded and not, and save so into DIR/at3; with `back`, ranks 0 and 1
        resume DIR/at3 as a job of 2 again
    python _sharded_resume.py without DIR
        one process, tfring never imported: each file of DIR loaded into a plain Adam, and
        resumed

One job where there were three (a save, a resume, a resume back) spares the suite the
processes' start, TensorFlow's import most of all.

Keras 3 saves Keras weights files (.weights.h5); tf_keras saves TensorFlow checkpoints
(ModelCheckpoint's save_weights_only to a path without .h5), which hold the optimizer.
"""

import os
import sys
import time

import numpy as np

TF_KERAS = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
SAVED = ("sharded", "plain")


def path(root, saved, tf_keras=TF_KERAS):
    return f"{root}/{saved}" + ("" if tf_keras else ".weights.h5")


def keras_module(tf_keras=TF_KERAS):
    if tf_keras:
        import tf_keras as k  # what tf.keras is under TF_USE_LEGACY_KERAS=1
    else:
        import keras as k
    return k


def model_and_optimizer(sharded, tf_keras=TF_KERAS):
    """The model, compiled with Adam: plain (sharded None) or in tfring's wrapper."""
    k = keras_module(tf_keras)
    k.utils.set_random_seed(3)
    x = k.Input((6,))
    h = k.layers.Dense(7, activation="tanh")(x)
    model = k.Model(x, k.layers.Dense(1)(h))
    adam = k.optimizers.Adam(0.01)
    if sharded is None:  # plain Keras
        model.compile(optimizer=adam, loss="mse")
        return model
    import tfring.keras as tk
    model.compile(optimizer=tk.DistributedOptimizer(adam, shard_optimizer_state=sharded),
                  loss="mse")
    return model


def data(rank):
    rng = np.random.default_rng(20 + rank)  # each rank its own data
    return (rng.normal(size=(12, 6)).astype(np.float32),
            rng.normal(size=(12, 1)).astype(np.float32))


def flat(model):
    return np.concatenate([w.ravel() for w in model.get_weights()])


def without_tfring(root, tf_keras):
    """Each file into a plain optimizer: the same state, and an epoch from it ends with the
    same weights."""
    states, weights = {}, {}
    for saved in SAVED:
        model = model_and_optimizer(None, tf_keras)
        model.optimizer.build(model.trainable_variables)
        model.load_weights(path(root, saved, tf_keras))
        states[saved] = [v.numpy() for v in model.optimizer.variables]
        model.fit(*data(0), batch_size=4, epochs=1, shuffle=False, verbose=0)
        weights[saved] = flat(model)
    same_state = len(states["sharded"]) == len(states["plain"]) > 2 and all(
        np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(states["sharded"],
                                                                 states["plain"]))
    moved = any(np.abs(v).max() > 0 for v in states["sharded"] if np.ndim(v) > 0)
    same = np.allclose(weights["sharded"], weights["plain"], rtol=1e-5, atol=1e-6)
    print(f"without tfring ({'tf_keras' if tf_keras else 'Keras 3'}): state as unsharded: "
          f"{same_state and moved}, resumed alike: {same}, tfring imported: "
          f"{'tfring' in sys.modules}", flush=True)


def fit(model, path_=None):
    import tfring
    import tfring.keras as tk
    k = keras_module()
    callbacks = [tk.callbacks.BroadcastGlobalVariablesCallback(0)]
    if path_ and tfring.rank() == 0:
        callbacks.append(k.callbacks.ModelCheckpoint(path_, save_weights_only=True))
    model.fit(*data(tfring.rank()), batch_size=4, epochs=1, shuffle=False, verbose=0,
              callbacks=callbacks)
    return flat(model)


def save(root):
    import tfring
    for sharded in (True, False):
        fit(model_and_optimizer(sharded), path(root, SAVED[0] if sharded else SAVED[1]))
    print(f"rank {tfring.rank()}: saved at {tfring.size()} ranks", flush=True)


def resume(root):
    import tfring
    results = {}
    for saved in SAVED:
        for sharded in (True, False):
            model = model_and_optimizer(sharded)
            model.optimizer.build(model.trainable_variables)
            if tfring.rank() == 0:  # rank 0 alone loads; the broadcast callback spreads it
                model.load_weights(path(root, saved))
            results[(saved, sharded)] = fit(model)
    reference = results[("plain", False)]
    worst = max(float(np.max(np.abs(w - reference))) for w in results.values())
    same = all(np.allclose(w, reference, rtol=1e-5, atol=1e-6) for w in results.values())
    print(f"rank {tfring.rank()}: resumed at {tfring.size()} ranks, all four alike: {same} "
          f"(largest difference {worst:.2e})", flush=True)


def chain(root, back):
    import tfring
    from mpi4py import MPI  # MPI_Init on every process, before any tfring job
    world = MPI.COMM_WORLD.Get_rank()
    at2, at3 = os.path.join(root, "at2"), os.path.join(root, "at3")
    saved_at2 = os.path.join(root, "saved-at-2")
    if world < 2:
        tfring.init(comm=[0, 1])
        save(at2)
        tfring.shutdown()
        if world == 0:
            open(saved_at2, "w").close()
    else:
        # Not in the job of two: waits for its files without spinning in MPI beside it.
        while not os.path.exists(saved_at2):
            time.sleep(0.1)
    tfring.init()
    resume(at2)
    save(at3)
    tfring.shutdown()
    if back and world < 2:
        tfring.init(comm=[0, 1])
        resume(at3)
        tfring.shutdown()


def main():
    mode, root = sys.argv[1], sys.argv[2]
    if mode == "without":
        without_tfring(root, tf_keras=TF_KERAS)
    else:
        chain(root, back=sys.argv[3:] == ["back"])


if __name__ == "__main__":
    main()
