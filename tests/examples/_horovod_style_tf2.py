"""What Horovod's TF2 synthetic benchmarks do, on tf_keras (TF_USE_LEGACY_KERAS=1), written
for tfring with a small model: run by test_examples.py as `mpirun -np 2 python THIS`.

1. The custom loop: a tf.function step with a DistributedGradientTape (optionally fp16
   compression), `opt.apply_gradients`, and on the first batch, inside the function,
   broadcast_variables of the model's and the optimizer's variables (`opt.variables()`).
2. model.fit: DistributedOptimizer(compression=...), compile with
   experimental_run_tf_function=False, a repeated tf.data set, steps_per_epoch, the
   broadcast and metric-average callbacks.

Each prints "<pattern>: identical on all ranks: True" when every rank ends with rank 0's
weights, and "<pattern>: loss fell: True" when training lowered the loss.
"""

import argparse

import numpy as np
import tensorflow as tf

import tfring
import tfring.keras as hvd_keras

parser = argparse.ArgumentParser()
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

tfring.init()
keras = tf.keras
assert keras.__name__.startswith("tf_keras"), "run with TF_USE_LEGACY_KERAS=1"
compression = tfring.Compression.fp16 if args.fp16_allreduce else tfring.Compression.none


def small_model(seed):
    keras.utils.set_random_seed(seed)  # each rank its own weights: the broadcast must fix it
    return keras.Sequential([
        keras.layers.Conv2D(4, 3, activation="relu", input_shape=(16, 16, 3)),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10, activation="softmax")])


def synthetic(seed):
    rng = np.random.default_rng(seed)
    data = rng.uniform(size=(args.batch_size, 16, 16, 3)).astype(np.float32)
    target = rng.integers(0, 10, size=(args.batch_size, 1))
    return tf.constant(data), tf.constant(target)


def identical(arrays, label):
    same = True
    for i, a in enumerate(arrays):
        root = tfring.broadcast_object(np.asarray(a), 0, name=f"{label}.{i}")
        same = same and np.array_equal(root, np.asarray(a))
    return same


def report(label, same, losses):
    if tfring.rank() == 0:
        print(f"{label}: identical on all ranks: {same}", flush=True)
        print(f"{label}: loss fell: {losses[-1] < losses[0]}", flush=True)


def custom_loop():
    model, opt = small_model(tfring.rank()), keras.optimizers.SGD(0.05)
    data, target = synthetic(tfring.rank())

    @tf.function
    def step(first_batch):
        with tf.GradientTape() as tape:
            probs = model(data, training=True)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(target, probs))
        tape = tfring.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:
            tfring.broadcast_variables(model.variables, root_rank=0)
            tfring.broadcast_variables(opt.variables(), root_rank=0)
        return tfring.allreduce(loss)

    losses = [float(step(True))] + [float(step(False)) for _ in range(args.steps)]
    report("custom loop", identical(model.get_weights(), "loop"), losses)


def fit():
    model = small_model(tfring.rank())
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.05), compression=compression)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(), optimizer=opt,
                  experimental_run_tf_function=False)
    data, target = synthetic(tfring.rank())
    dataset = tf.data.Dataset.from_tensor_slices((data, target)).cache().repeat().batch(
        args.batch_size)
    history = model.fit(dataset, steps_per_epoch=2, epochs=args.steps // 2, verbose=0,
                        callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd_keras.callbacks.MetricAverageCallback()])
    report("fit", identical(model.get_weights(), "fit"), history.history["loss"])


custom_loop()
fit()
