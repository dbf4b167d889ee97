"""What the elastic scenarios share (elastic_scenarios.py, elastic_growth_scenarios.py): a
linear regression every worker can recompute for any worker, numpy's replay of a training
schedule, the line each worker prints at the end, and the scripts' entry point."""

import os
import sys

import numpy as np

import tfring

TRUE_W = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)


def say(text):
    print(f"rank {tfring.rank()}: {text}", flush=True)


def batch_of(step, worker, rows=8):
    """Worker `worker`'s batch `step` of a linear regression every rank can recompute."""
    x = np.random.default_rng(100 * step + worker).normal(size=(rows, 4)).astype(np.float32)
    return x, x @ TRUE_W


JOINED = 99  # initial_weights' identity for a worker started to grow the job


def initial_weights(identity):
    """The Dense(1) weights a worker starts with, its own (the state's first sync gives every
    worker rank 0's): `identity` is the rank a first worker was started as, or JOINED.
    Every worker can recompute any worker's, for numpy's replay."""
    rng = np.random.default_rng(1000 + identity)
    return [rng.normal(size=(4, 1)).astype(np.float32), rng.normal(size=(1,)).astype(np.float32)]


def _gradients(w, b, step, worker):
    x, y = batch_of(step, worker)
    err = x @ w + b - y
    return 2 * x.T @ err / err.size, 2 * err.sum(axis=0) / err.size


def numpy_sgd(start, schedule):
    """Replays training in float64: `schedule` lists (workers, batch index, learning rate)
    per step; each step averages the workers' mean-squared-error gradients, as tfring does.
    A step may carry a fourth item, {worker: (w, b)}: workers that compute their gradient
    at weights of their own (not yet synced from rank 0); the update is rank 0's."""
    w, b = start[0].astype(np.float64), start[1].astype(np.float64)
    for workers, step, lr, *own in schedule:
        at = {k: (v[0].astype(np.float64), v[1].astype(np.float64))
              for k, v in (own[0] if own else {}).items()}
        grads = [_gradients(*at.get(worker, (w, b)), step, worker) for worker in range(workers)]
        w = w - lr * np.mean([g[0] for g in grads], axis=0)
        b = b - lr * np.mean([g[1] for g in grads], axis=0)
    return w, b


def report(state, values, expected, sizes_at_reset, me):
    """Prints how this survivor finished: `values` are its final weights and bias."""
    got_w, got_b = values
    close = np.allclose(got_w, expected[0], rtol=1e-4, atol=1e-5) and np.allclose(
        got_b, expected[1], rtol=1e-4, atol=1e-5)
    print(f"rank {me}: finished at epoch {getattr(state, 'epoch', '-')} batch {state.batch} "
          f"as rank {tfring.rank()} of {tfring.size()}, resets saw sizes {sizes_at_reset}, "
          f"matches numpy: {close}, weights {got_w.ravel().tolist()} {got_b.tolist()}",
          flush=True)


def main(scenarios):
    """`python SCRIPT NAME`: runs scenario NAME, a function of `scenarios` (the script's
    globals()). A worker spawned to grow the job fails at once where the test asks for it
    (TFRING_TEST_SPAWNED_FAIL), before it joins."""
    if os.environ.get("TFRING_TEST_SPAWNED_FAIL") and "OMPI_PARENT_PORT" in os.environ:
        print("a spawned worker fails before it joins", flush=True)
        sys.exit(3)
    tfring.init()
    scenarios[sys.argv[1]]()
