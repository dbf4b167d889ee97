"""The classic Horovod TF1 script, with tfring: MonitoredTrainingSession, DistributedOptimizer
around Adagrad, BroadcastGlobalVariablesHook, checkpoints on rank 0 only.

    mpirun -np 2 python examples/tf1_monitored_session.py [--checkpoint-dir DIR]

Trains a small classifier on the handwritten digits in data/ (each rank on its shard) and prints the
test accuracy on rank 0.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring  # noqa: E402
import _digits  # noqa: E402

v1 = tf.compat.v1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="global steps")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="where rank 0 writes checkpoints (default: none)")
    args = parser.parse_args()

    tfring.init()
    v1.disable_eager_execution()
    x_train, y_train, x_test, y_test = _digits.load(tfring.rank(), tfring.size())

    images = v1.placeholder(tf.float32, [None, 64])
    labels = v1.placeholder(tf.int64, [None])
    # Plain TF1 variables (tf.compat.v1.layers needs Keras 2, absent with Keras 3).
    init = v1.glorot_uniform_initializer()
    w1 = v1.get_variable("w1", [64, 64], initializer=init)
    b1 = v1.get_variable("b1", [64], initializer=v1.zeros_initializer())
    w2 = v1.get_variable("w2", [64, 10], initializer=init)
    b2 = v1.get_variable("b2", [10], initializer=v1.zeros_initializer())
    hidden = tf.nn.relu(tf.matmul(images, w1) + b1)
    logits = tf.matmul(hidden, w2) + b2
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))

    global_step = v1.train.get_or_create_global_step()
    # Horovod's recipe: scale the learning rate by the number of ranks, wrap the optimizer.
    opt = tfring.DistributedOptimizer(v1.train.AdagradOptimizer(0.1 * tfring.size()))
    train_op = opt.minimize(loss, global_step=global_step)

    hooks = [
        # Every rank starts from rank 0's initial weights (or its restored checkpoint).
        tfring.BroadcastGlobalVariablesHook(0),
        v1.train.StopAtStepHook(last_step=args.steps),
    ]
    # Only rank 0 writes checkpoints, so ranks do not overwrite each other's.
    checkpoint_dir = args.checkpoint_dir if tfring.rank() == 0 else None
    rng = np.random.default_rng(tfring.rank())
    # One GPU per process, as in Horovod's TF1 examples: the session sees only the GPU at
    # this rank's local rank, and grows its memory (NCCL needs room beside TensorFlow).
    config = v1.ConfigProto()
    config.gpu_options.allow_growth = True
    if tf.config.list_physical_devices("GPU"):
        config.gpu_options.visible_device_list = str(tfring.local_rank())
    with v1.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir, hooks=hooks,
                                           config=config, log_step_count_steps=None) as sess:
        while not sess.should_stop():
            idx = rng.integers(0, len(x_train), args.batch_size)
            _, step = sess.run([train_op, global_step],
                               feed_dict={images: x_train[idx], labels: y_train[idx]})
            if step % 100 == 0 and tfring.rank() == 0:
                test_accuracy = sess.run(accuracy, feed_dict={images: x_test, labels: y_test})
                print(f"step {step}: test accuracy {test_accuracy:.3f}", flush=True)
    if tfring.rank() == 0:
        print("done: test accuracy above is on 360 held-out digits (chance 0.100)")
    tfring.shutdown()


if __name__ == "__main__":
    main()
