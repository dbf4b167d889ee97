"""A job that uses more tensor names than its response cache holds (TFRING_CACHE_CAPACITY is
set small by tests/jobs/test_cache_capacity.py): a broadcast of many variables once, as at
the start of training, then training steps whose gradients come after them, and a step of
more tensors than the cache holds. Every result is checked against numpy on every rank;
each rank prints one line when all were right."""

import os

import numpy as np
import tensorflow as tf

import tfring

tfring.init()
RANK, SIZE = tfring.rank(), tfring.size()
CAPACITY = int(os.environ["TFRING_CACHE_CAPACITY"])


def check(got, want, what):
    if not np.array_equal(np.asarray(got), np.asarray(want)):
        raise AssertionError(f"rank {RANK}: {what}: got {got}, want {want}")


# As BroadcastGlobalVariables does once: one name per variable, never used again.
variables = [tf.Variable(np.full(3, RANK * 10 + i, np.float32)) for i in range(3 * CAPACITY)]
tfring.broadcast_variables(variables, root_rank=0)
for i, v in enumerate(variables):
    check(v.numpy(), np.full(3, i, np.float32), f"variable {i} after the broadcast")


@tf.function
def gradients_step(grads):
    return [tfring.allreduce(g, op=tfring.Sum) for g in grads]


ranks_sum = SIZE * (SIZE - 1) / 2
for step in range(5):  # fewer tensors than the cache holds: cached after the first step
    grads = [tf.constant(np.full(4, RANK + step + i, np.float32)) for i in range(CAPACITY // 2)]
    for i, out in enumerate(gradients_step(grads)):
        check(out.numpy(), np.full(4, ranks_sum + SIZE * (step + i), np.float32),
              f"step {step}, gradient {i}")


@tf.function
def wide_step(grads):
    return [tfring.allreduce(g, op=tfring.Sum) for g in grads]


for step in range(3):  # more tensors than the cache holds: some negotiated every step
    grads = [tf.constant(np.full(2, RANK * step + i, np.float32)) for i in range(2 * CAPACITY)]
    for i, out in enumerate(wide_step(grads)):
        check(out.numpy(), np.full(2, ranks_sum * step + SIZE * i, np.float32),
              f"wide step {step}, tensor {i}")
print(f"rank {RANK}: all results right", flush=True)
