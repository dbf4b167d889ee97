"""TF2 custom training loop with tfring.DistributedGradientTape.

    mpirun -np 2 python examples/tf2_custom_loop.py

Each rank trains on its shard of the digits; gradients are averaged over ranks, so all ranks
keep identical weights (checked at the end). Prints test accuracy on rank 0.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring  # noqa: E402
import _digits  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    args = parser.parse_args()

    tfring.init()
    # One GPU per process (the one at this rank's local rank, memory growth on), as
    # Horovod's examples do by hand; nothing where there is no GPU.
    tfring.pin_gpu()
    x_train, y_train, x_test, y_test = _digits.load(tfring.rank(), tfring.size())
    tf.random.set_seed(1234 + tfring.rank())  # different on purpose: the broadcast fixes it

    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(64, "relu"),
                                 tf.keras.layers.Dense(10)])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Scale the learning rate by the number of ranks (the global batch grows with it).
    optimizer = tf.keras.optimizers.SGD(0.05 * tfring.size(), momentum=0.9)

    @tf.function
    def train_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = tfring.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        # After the first step (optimizer slots exist), everyone takes rank 0's state.
        if first_batch:
            tfring.broadcast_variables(model.variables + optimizer.variables, root_rank=0)
        return tfring.allreduce(loss, name="loss")

    # Every rank runs the same number of steps (shards may differ by one example).
    steps = len(x_train) // args.batch_size
    steps = int(tfring.allreduce(tf.constant(steps), op=tfring.Min, name="steps"))
    first = True
    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch + 100 * tfring.rank()).permutation(len(x_train))
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            loss = train_step(x_train[idx], y_train[idx], first)
            first = False
        if tfring.rank() == 0:
            print(f"epoch {epoch + 1}: last batch loss (mean over ranks) {float(loss):.4f}",
                  flush=True)

    logits = model(x_test, training=False)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test))
    same = all(np.array_equal(v.numpy(), tfring.broadcast(v, 0, name=f"check.{i}").numpy())
               for i, v in enumerate(model.variables))
    all_same = int(tfring.allreduce(tf.constant(int(same)), op=tfring.Min, name="same"))
    if tfring.rank() == 0:
        print(f"test accuracy {accuracy:.3f} (chance 0.100); weights identical on all "
              f"{tfring.size()} ranks: {bool(all_same)}")
    tfring.shutdown()
    if not all_same:
        raise SystemExit("weights differ between ranks")


if __name__ == "__main__":
    main()
