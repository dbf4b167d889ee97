"""What Horovod's TF2 synthetic benchmarks do, on tf_keras (TF_USE_LEGACY_KERAS=1), written
for tfring with a small model: run by test_examples.py as `mpirun -np 2 python THIS`.

1. The custom loop: a tf.function step with a DistributedGradientTape (optionally fp16
   compression), `opt.apply_gradients`, and on the first batch, inside the function,
   broadcast_variables of the model's and the optimizer's variables (`opt.variables()`).
2. model.fit: DistributedOptimizer(compression=...), compile with
   experimental_run_tf_function=False, a repeated tf.data set, steps_per_epoch, the
   broadcast and metric-average callbacks.

Each prints "<pattern>: identical on all ranks: True" when every rank ends with rank 0's
weights, "<pattern>: loss fell: True" when training lowered the loss, and
"<pattern>: float16 on the wire: True|False", from what the reduction delivered: True when
the reduced gradients (the custom loop's, from the tape) or the updates they made (fit's)
are float16 values, as --fp16-allreduce makes them, with enough values to tell.
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


def report(label, same, losses, float16):
    if tfring.rank() == 0:
        print(f"{label}: identical on all ranks: {same}", flush=True)
        print(f"{label}: loss fell: {losses[-1] < losses[0]}", flush=True)
        verdict, telling = float16
        print(f"{label}: float16 on the wire: {verdict} ({telling} values tell)", flush=True)


TELLING = 20  # values that must tell float16 from float32 before either is claimed


def float16_values(arrays):
    """(Whether the gradients are float16 values cast to float32, how many values tell): a
    float32 mean of float32 gradients has nearly every nonzero value between two float16
    ones. "unknown" with fewer than TELLING nonzero values."""
    values = np.concatenate([np.ravel(a) for a in arrays]).astype(np.float32)
    nonzero = values[values != 0]
    if len(nonzero) < TELLING:
        return "unknown", len(nonzero)
    return bool(np.all(nonzero.astype(np.float16).astype(np.float32) == nonzero)), len(nonzero)


def float16_moves(before, after, lr):
    """(Whether SGD(lr) moved the weights by float16 gradients, how many weights tell).
    Where a weight moved by at least 2**-10 of itself, the gradient is recovered from the
    move to within 2**-13 of itself, less than half a float16 step, so rounding it to float16
    gives back the float16 gradient that moved it (if one did), and w - lr * that gradient,
    rounded as float32 rounds (product and difference, or one fused rounding), must give
    the weight after. A float32 gradient's move is rarely so explained: every telling
    weight must be."""
    w0 = np.concatenate([np.ravel(a) for a in before]).astype(np.float32)
    w1 = np.concatenate([np.ravel(a) for a in after]).astype(np.float32)
    moved = w1.astype(np.float64) - w0
    telling = np.abs(moved) >= 2.0 ** -10 * np.abs(w0)
    g16 = (moved / -np.float64(np.float32(lr))).astype(np.float16).astype(np.float32)
    lr32 = np.float32(lr)
    rounded_twice = w0 - lr32 * g16  # float32 arithmetic, as the optimizer's ops
    fused = (w0.astype(np.float64) - np.float64(lr32) * g16).astype(np.float32)
    explained = (rounded_twice == w1) | (fused == w1)
    if telling.sum() < TELLING:
        return "unknown", int(telling.sum())
    return bool(np.all(explained[telling])), int(telling.sum())


class LastStep(keras.callbacks.Callback):
    """The weights before and after the last step of fit."""

    def on_train_batch_begin(self, batch, logs=None):
        self.before = self.model.get_weights()

    def on_train_batch_end(self, batch, logs=None):
        self.after = self.model.get_weights()


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
        return tfring.allreduce(loss), grads

    losses = [float(step(True)[0])]
    for _ in range(args.steps):
        loss, grads = step(False)
        losses.append(float(loss))
    report("custom loop", identical(model.get_weights(), "loop"), losses,
           float16_values([g.numpy() for g in grads]))


def fit():
    model = small_model(tfring.rank())
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.05), compression=compression)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(), optimizer=opt,
                  experimental_run_tf_function=False)
    data, target = synthetic(tfring.rank())
    dataset = tf.data.Dataset.from_tensor_slices((data, target)).cache().repeat().batch(
        args.batch_size)
    last = LastStep()
    history = model.fit(dataset, steps_per_epoch=2, epochs=args.steps // 2, verbose=0,
                        callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd_keras.callbacks.MetricAverageCallback(), last])
    report("fit", identical(model.get_weights(), "fit"), history.history["loss"],
           float16_moves(last.before, last.after, 0.05))


custom_loop()
fit()
