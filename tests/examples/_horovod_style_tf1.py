"""What Horovod's TF1 synthetic benchmark does, run by a TF2 user as TF1 code must be
(`tensorflow.compat.v1`, `disable_v2_behavior()`, tf_keras for the model), written for
tfring with a small model: run by test_examples.py as `mpirun -np 2 python THIS`.

Its order matters: the model, then DistributedOptimizer (op=Adasum with --use-adasum,
fp16 compression with --fp16-allreduce), then global_variables_initializer() and
broadcast_global_variables(0), and only inside the session, after both ran, the loss and
opt.minimize(loss). Prints "tf1: identical on all ranks: True" when every rank ends with the
same weights (Adasum combines every step, so they agree after each) and "tf1: loss fell:
True". And what the first step did, from the weights before and after it and every rank's
own gradients there: "tf1: float16 on the wire: True|False" (whether the weights moved by
float16 values, as --fp16-allreduce makes them) and "tf1: first update, relative error as
adasum A, as average B": how far the move is from the Adasum of the ranks' own updates
(--use-adasum) and from their sum, which an Average at the learning rate times the size
makes (neither flag; Adasum differs from it where the ranks' gradients are not orthogonal).
"""

import argparse

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()

import tfring  # noqa: E402

TELLING = 20  # weights that must tell float16 from float32 before either is claimed


def float16_moves(before, after, lr):
    """(Whether SGD(lr) moved the weights by float16 values, how many weights tell); lr=-1:
    whether float16 values were added to them (Adasum's combined update). Where a weight
    moved by at least 2**-10 of itself, the value is recovered from the move to within
    2**-13 of itself, less than half a float16 step, so rounding it to float16 gives back
    the float16 value that moved it (if one did), and w - lr * that value, rounded as float32
    rounds (product and difference, or one fused rounding), must give the weight after. A
    float32 value's move is rarely so explained: every telling weight must be."""
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


def adasum(updates):
    """Adasum of the ranks' updates (each a float64 vector), pairwise as a tree of ranks:
    a, b -> (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b."""
    if len(updates) == 1:
        return updates[0]
    half = len(updates) // 2
    a, b = adasum(updates[:half]), adasum(updates[half:])
    dot = a @ b
    return (1 - dot / (2 * (a @ a))) * a + (1 - dot / (2 * (b @ b))) * b

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
    own_gradients = tf.gradients(loss, model.trainable_weights)  # this rank's, not reduced
    before, own = session.run([model.trainable_weights, own_gradients])
    losses = []
    for step in range(args.steps):
        session.run(train)
        if step == 0:
            after = session.run(model.trainable_weights)
        losses.append(session.run(mean_loss))
    weights = session.run(model.weights)
    every_rank = tfring.allgather_object(own, session=session, name="own_gradients")

# The first step's move, per variable, against what each reduction would have made of the
# ranks' own updates (-0.05 times their gradients: the learning rate before lr_scale).
moved = np.concatenate([(a.astype(np.float64) - b).ravel() for a, b in zip(after, before)])
updates = [[-0.05 * g.astype(np.float64).ravel() for g in grads] for grads in every_rank]
as_adasum = np.concatenate([adasum([u[i] for u in updates]) for i in range(len(before))])
as_average = np.concatenate([sum(u[i] for u in updates) for i in range(len(before))])
errors = [np.linalg.norm(moved - want) / np.linalg.norm(moved) for want in (as_adasum, as_average)]
lr = 0.05 * lr_scale
verdict, telling = float16_moves(before, after, -1 if args.use_adasum else lr)

same = True
for i, w in enumerate(weights):
    same = same and np.array_equal(tfring.broadcast_object(w, 0, name=f"w.{i}"), w)
if tfring.rank() == 0:
    print(f"tf1: identical on all ranks: {same}", flush=True)
    print(f"tf1: loss fell: {losses[-1] < losses[0]}", flush=True)
    print(f"tf1: float16 on the wire: {verdict} ({telling} values tell)", flush=True)
    print(f"tf1: first update, relative error as adasum {errors[0]:.1e}, "
          f"as average {errors[1]:.1e}", flush=True)
