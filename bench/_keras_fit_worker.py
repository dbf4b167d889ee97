"""One measurement for bench/keras_fit.py: samples/s of model.fit in one of four set-ups.

    python _keras_fit_worker.py single --model mlp          # 1 process, plain Keras 3
    mpirun -np 2 python _keras_fit_worker.py tfring ...     # tfring.keras, N ranks
    mpirun -np 2 python _keras_fit_worker.py floor ...      # the same, allreduces replaced
                                                            # by the async floor op
    mpirun -np 2 python _keras_fit_worker.py floor-mpi ...  # the floor, and after each step
                                                            # raw MPI's transfer of the step
    TF_CONFIG=... TF_USE_LEGACY_KERAS=1 python _keras_fit_worker.py mwms ...  # TF's own

Prints one JSON line (rank 0 / chief only): samples/s in total over all processes, the step
time, and for tfring whether every rank ended with identical weights.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def build_model(keras, name):
    if name == "mlp":  # 20 x Dense(512) + Dense(10): 5.3M parameters, 42 gradient tensors
        layers = [keras.Input((512,))]
        layers += [keras.layers.Dense(512, activation="relu") for _ in range(20)]
        layers.append(keras.layers.Dense(10))
        return keras.Sequential(layers), (512,)
    if name == "cnn":  # a small CNN on 32x32x3
        return keras.Sequential([
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]), (32, 32, 3)
    if name == "comm":  # 60 x Dense(32) + Dense(10): 122 small gradient tensors, little
        # compute: a step whose time is mostly tfring's per-tensor and per-step cost
        layers = [keras.Input((32,))]
        layers += [keras.layers.Dense(32, activation="relu") for _ in range(60)]
        layers.append(keras.layers.Dense(10))
        return keras.Sequential(layers), (32,)
    raise ValueError(f"unknown model {name!r}")


class StepTimer:
    """Times the batches after `warmup` ones (the first traces and allocates)."""

    def __init__(self, warmup):
        self.warmup, self.count, self.start, self.end = warmup, 0, None, None
        self.steps = []  # each timed step's seconds

    def on_batch_end(self):
        self.count += 1
        now = time.perf_counter()
        if self.count > self.warmup:
            self.steps.append(now - self.end)
        if self.count == self.warmup:
            self.start = now
        self.end = now

    def seconds_per_step(self):
        """The mean: what the throughput is."""
        return (self.end - self.start) / (self.count - self.warmup)

    def median_seconds_per_step(self):
        """The typical step. A few steps of a run take several times as long (the VM, the
        other rank's scheduling; and in synchronous training the slower rank sets every
        step), which moves the mean of a short run by more than the differences the
        overhead table is after."""
        ordered = sorted(self.steps)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def raw_transfer_callback(keras, np, model):
    """After each step, what any allreduce of the step's gradients must move, done by raw MPI
    (mpi4py in the ranks' processes, tfring's MPI settings): one allreduce of all gradients
    packed (float32 Sum, reused buffers), and before it a 4-byte one, the agreement of the
    ranks that the tensors are ready (tfring's cycle makes one). Added to the async floor, it
    is the step's cost without tfring's runtime: TensorFlow's and the transport's."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    count = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    send, recv = np.ones(count, np.float32), np.empty(count, np.float32)
    ready, agreed = np.ones(1, np.int32), np.empty(1, np.int32)

    def transfer(batch, logs=None):
        comm.Allreduce(ready, agreed, op=MPI.BAND)
        comm.Allreduce(send, recv, op=MPI.SUM)
    return keras.callbacks.LambdaCallback(on_train_batch_end=transfer)


def make_data(np, shape, n, seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n,) + shape).astype(np.float32),
            rng.integers(0, 10, size=(n,)).astype(np.int64))


def run(args):
    import numpy as np
    import tensorflow as tf

    workers, rank = 1, 0
    ranked = args.mode in ("tfring", "floor", "floor-mpi")
    if ranked:
        import tfring.keras as hvd
        hvd.init()
        workers, rank = hvd.size(), hvd.rank()
    if args.mode in ("floor", "floor-mpi"):
        # tfring's optimizer and callbacks, each gradient's allreduce replaced by the async
        # floor op (bench/ops/async_floor.cc): TensorFlow's cost of the step's async
        # ops, with no communication and no runtime. Weights then differ between ranks.
        # With raw MPI after the step, the ops complete as tfring's do: a step's burst
        # together, from a background thread (TfringAsyncBurstFloor).
        from tfring._training import gradients as _gradients
        import _bench_ops
        ops = _bench_ops.ops()
        if args.mode == "floor":
            _gradients.allreduce_gradients = (
                lambda grads, variables, **kw: [ops.tfring_async_floor(g) for g in grads])
        else:
            _gradients.allreduce_gradients = (
                lambda grads, variables, **kw: [ops.tfring_async_burst_floor(g, burst=len(grads))
                                                for g in grads])
    if args.mode == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        workers = strategy.num_replicas_in_sync
        rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        keras = tf.keras  # tf_keras: MWMS + Keras 3 model.fit fails (README, Benchmarks)
        scope = strategy.scope()
    else:
        import contextlib
        import keras
        scope = contextlib.nullcontext()

    keras.utils.set_random_seed(7)
    with scope:
        model, shape = build_model(keras, args.model)
        optimizer = (keras.optimizers.Adam(1e-3) if args.optimizer == "adam"
                     else keras.optimizers.SGD(0.01))
        if ranked:
            optimizer = hvd.DistributedOptimizer(optimizer,
                                                 shard_optimizer_state=args.shard_optimizer_state)
        # XLA as asked: Keras 3's "auto" leaves it off on a CPU; tf_keras (MWMS) stays as is.
        jit = {} if args.mode == "mwms" else {"jit_compile": args.jit_compile}
        model.compile(optimizer=optimizer,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), **jit)

    timer = StepTimer(args.warmup)
    callback = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs=None: timer.on_batch_end())
    callbacks = [callback]
    if ranked:
        callbacks.insert(0, hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    if args.mode == "floor-mpi":
        callbacks.insert(0, raw_transfer_callback(keras, np, model))
    steps = args.warmup + args.steps
    x, y = make_data(np, shape, steps * args.batch, seed=rank)
    if args.mode == "mwms":
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch * workers)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        dataset = dataset.with_options(options).repeat()
        model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=callbacks)
    else:
        model.fit(x, y, batch_size=args.batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=callbacks)
    step_s = timer.seconds_per_step()
    result = {"mode": args.mode, "model": args.model, "workers": workers,
              "batch_per_worker": args.batch, "step_ms": step_s * 1e3,
              "step_median_ms": timer.median_seconds_per_step() * 1e3,
              "samples_per_s": workers * args.batch / step_s,
              "jit_compile": bool(getattr(model, "jit_compile", False)),
              "weight_bytes": int(sum(np.prod(w.shape) * w.dtype.itemsize
                                      for w in model.get_weights()))}
    if args.shard_optimizer_state:
        # The flat buffers the ranks reduce-scatter and allgather: the weights and the
        # padding that starts each variable aligned (tfring/_training/sharded_state.py).
        update = model.optimizer._sharded.update
        result["sharded_buffer_bytes"] = int(sum(layout.total * layout.dtype.size
                                                 for layout in update.layouts))
    if args.mode == "tfring":
        weights = model.get_weights()
        same = all(np.array_equal(w, hvd.broadcast(w, 0, name=f"bench.check.{i}"))
                   for i, w in enumerate(weights))
        result["identical_weights"] = bool(hvd.allreduce(int(same), op=hvd.Min,
                                                         name="bench.same"))
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["single", "tfring", "floor", "floor-mpi", "mwms"])
    parser.add_argument("--model", choices=["mlp", "cnn", "comm"], default="mlp")
    parser.add_argument("--batch", type=int, default=64, help="per process")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--jit-compile", action="store_true", help="compile the step with XLA")
    parser.add_argument("--shard-optimizer-state", action="store_true",
                        help="tfring: DistributedOptimizer(shard_optimizer_state=True)")
    run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
