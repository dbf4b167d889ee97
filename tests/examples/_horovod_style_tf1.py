"""What Horovod's TF1 synthetic benchmark does, run by a TF2 user as TF1 code must be
(`tensorflow.compat.v1`, `disable_v2_behavior()`, tf_keras for the model), written for
tfring with a small model: run by test_examples.py as `mpirun -np 2 python THIS`.

Its order matters: the model, then DistributedOptimizer (op=Adasum with --use-adasum,
fp16 compression with --fp16-allreduce), then global_variables_initializer() and
broadcast_global_variables(0), and only inside the session, after both ran, the loss and
opt.minimize(loss). Prints "tf1: identical on all ranks: True" when every rank ends with the
same weights (Adasum combines every step, so they agree after each) and "tf1: loss fell:
True".
"""

import argparse

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()

import tfring  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--use-adasum", action="store_true")
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

tfring.init()
keras = tf.keras
assert keras.__name__.startswith("tf_keras"), "run with TF_USE_LEGACY_KERAS=1"

tf.set_random_seed(tfring.rank())  # each rank its own weights: the broadcast must fix it
model = keras.Sequential([
    keras.layers.Conv2D(4, 3, activation="relu", input_shape=(16, 16, 3)),
    keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10, activation="softmax")])
lr_scale = 1 if args.use_adasum else tfring.size()  # Adasum needs no scaling, as Horovod says
opt = tf.train.GradientDescentOptimizer(0.05 * lr_scale)
opt = tfring.DistributedOptimizer(
    opt, compression=tfring.Compression.fp16 if args.fp16_allreduce else tfring.Compression.none,
    op=tfring.Adasum if args.use_adasum else tfring.Average)
init = tf.global_variables_initializer()
bcast = tfring.broadcast_global_variables(0)

rng = np.random.default_rng(tfring.rank())
data = tf.constant(rng.uniform(size=(args.batch_size, 16, 16, 3)).astype(np.float32))
target = tf.constant(rng.integers(0, 10, size=(args.batch_size, 1)))

with tf.Session() as session:
    init.run()
    bcast.run()
    loss = tf.losses.sparse_softmax_cross_entropy(target, model(data, training=True))
    train = opt.minimize(loss)  # after the initializer ran: its own state initializes itself
    mean_loss = tfring.allreduce(loss, name="mean_loss")
    losses = []
    for _ in range(args.steps):
        session.run(train)
        losses.append(session.run(mean_loss))
    weights = session.run(model.weights)

same = True
for i, w in enumerate(weights):
    same = same and np.array_equal(tfring.broadcast_object(w, 0, name=f"w.{i}"), w)
if tfring.rank() == 0:
    print(f"tf1: identical on all ranks: {same}", flush=True)
    print(f"tf1: loss fell: {losses[-1] < losses[0]}", flush=True)
