"""One configuration of bench/autotune.py, run under mpirun: prints rank 0's steps/s.

A step is one tf.function that allreduces 60 gradient-like tensors (4 KiB to 1 MiB) after a
little compute, as a training step's gradients arrive. With TFRING_AUTOTUNE=1 the steps run
until the tuner has chosen (its log ends with the choice), and only then is it timed.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring  # noqa: E402

tfring.init()
rank = tfring.rank()
sizes = [1024 * (1 + (i * 37) % 256) for i in range(60)]  # floats: 4 KiB .. 1 MiB
grads = [tf.fill([n], float(rank + 1)) for n in sizes]
weights = tf.random.normal([256, 256], seed=1)


@tf.function
def step():
    work = tf.reduce_sum(tf.matmul(weights, weights))  # the compute gradients overlap with
    reduced = [tfring.allreduce(g + 0.0 * work, op=tfring.Sum, name=f"bench.g{i}")
               for i, g in enumerate(grads)]
    return reduced[0][0]


def run_for(seconds):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    return n, time.perf_counter() - start


log = os.environ.get("TFRING_AUTOTUNE_LOG")
for i in range(100000):  # warm up; with the tuner, until it has chosen
    step()
    if i >= 20 and i % 10 == 0:
        tuned = log is None or (rank == 0 and os.path.exists(log) and  # rank 0 writes it
                                open(log).read().rstrip().endswith(",1"))
        if tfring.allreduce(tf.constant([int(tuned)]), op=tfring.Max, name="bench.tuned").numpy()[0]:
            break
for _ in range(10):
    step()  # the choice in force on every rank
seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
n, elapsed = run_for(seconds)
rates = tfring.allgather(tf.constant([n / elapsed]), name="bench.rates").numpy()
if rank == 0:
    print(f"STEPS_PER_SECOND {np.min(rates):.2f}")
