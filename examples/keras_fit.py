"""Keras 3 model.fit on N ranks with tfring.keras: Horovod's Keras recipe, one import changed.

    mpirun -np 2 python examples/keras_fit.py [--epochs 10] [--checkpoint-dir DIR]

Each rank fits on its shard of the handwritten digits in data/ (nothing is downloaded). The
learning rate is scaled by the number of ranks and warmed up; epoch metrics are averaged over
ranks; only rank 0 prints progress and writes checkpoints. At the end rank 0 prints the test
accuracy and whether every rank holds identical weights.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring.keras as hvd  # noqa: E402  (was: import horovod.tensorflow.keras as hvd)
import _digits  # noqa: E402


def build_model():
    return keras.Sequential([
        keras.Input((64,)),
        keras.layers.Reshape((8, 8, 1)),
        keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by size")
    parser.add_argument("--checkpoint-dir", default=None, help="rank 0 saves here each epoch")
    args = parser.parse_args()

    hvd.init()
    # One GPU per process, as in Horovod's examples: without this every rank of a host
    # would use GPU 0, which NCCL refuses (tfring.pin_gpu() does the same in one call).
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    x_train, y_train, x_test, y_test = _digits.load(hvd.rank(), hvd.size())
    keras.utils.set_random_seed(1234 + hvd.rank())  # different on purpose: the broadcast fixes it

    model = build_model()
    scaled_lr = args.lr * hvd.size()  # the global batch grows with the number of ranks
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(scaled_lr, momentum=0.9))
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

    callbacks = [
        # Every rank starts from rank 0's weights and optimizer state.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Epoch metrics (and validation metrics) averaged over ranks.
        hvd.callbacks.MetricAverageCallback(),
        # A large learning rate hurts early on: ramp up from scaled_lr / size over 2 epochs.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2,
                                                 verbose=1),
    ]
    if hvd.rank() == 0 and args.checkpoint_dir:
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")))

    # Every rank must take the same number of steps: shards may differ by one example.
    steps = int(hvd.allreduce(len(x_train) // args.batch_size, op=hvd.Min, name="steps"))
    n = steps * args.batch_size
    # Each rank validates on its own half of the test set; MetricAverageCallback averages.
    x_val, y_val = x_test[hvd.rank()::hvd.size()], y_test[hvd.rank()::hvd.size()]
    model.fit(x_train[:n], y_train[:n], batch_size=args.batch_size, epochs=args.epochs,
              validation_data=(x_val, y_val), callbacks=callbacks,
              verbose=2 if hvd.rank() == 0 else 0)

    accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), axis=1) == y_test))
    same = all(np.array_equal(w, hvd.broadcast(w, 0, name=f"check.{i}"))
               for i, w in enumerate(model.get_weights()))
    all_same = bool(hvd.allreduce(int(same), op=hvd.Min, name="same"))
    if hvd.rank() == 0:
        print(f"test accuracy {accuracy:.3f} (chance 0.100); weights identical on all "
              f"{hvd.size()} ranks: {all_same}", flush=True)
    hvd.shutdown()
    if not all_same:
        raise SystemExit("weights differ between ranks")


if __name__ == "__main__":
    main()
