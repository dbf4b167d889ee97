"""Bytes of optimizer state per rank, unsharded and with shard_optimizer_state=True, for
bench/keras_fit.py's MLP (5.3M float32 parameters) with Adam, at 1, 2 and 3 ranks.

    .venv/bin/python bench/sharded_memory.py          # prints a markdown table

Counts `model.optimizer.variables` after one training step, leaving out scalars (the step
counter, the learning rate): what docs/sharded-optimizer.md's 'Memory' table reports. Each
rank measures its own; the table shows the largest over the ranks.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


def measure(sharded):
    """On each rank: one step of the MLP, then the optimizer's non-scalar bytes (rank 0
    prints the largest over the ranks)."""
    import keras
    import numpy as np
    import tensorflow as tf

    import tfring
    import tfring.keras as tk
    sys.path.insert(0, HERE)
    from _keras_fit_worker import build_model

    tfring.init()
    model, shape = build_model(keras, "mlp")
    opt = tk.DistributedOptimizer(keras.optimizers.Adam(1e-3), shard_optimizer_state=sharded)
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    x = np.random.default_rng(0).normal(size=(8,) + shape).astype("float32")
    model.fit(x, np.zeros(8, "int32"), batch_size=8, epochs=1, verbose=0)
    mine = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size
               for v in model.optimizer.variables if int(np.prod(v.shape)) > 1)
    largest = int(tfring.allreduce(tf.constant(mine, tf.int64), op=tfring.Max).numpy())
    if tfring.rank() == 0:
        print("RESULT " + json.dumps({"bytes": largest}))


def run(ranks, sharded):
    cmd = [os.path.join(BIN, "mpirun"), "--oversubscribe", "-np", str(ranks),
           sys.executable, __file__, "--worker"] + (["--sharded"] if sharded else [])
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])["bytes"]
    raise RuntimeError(f"{cmd} printed no result:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")


def main():
    if "--worker" in sys.argv:
        measure("--sharded" in sys.argv)
        return
    print("| ranks | unsharded, bytes per rank | sharded, bytes per rank | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for ranks in (1, 2, 3):
        plain, sharded = run(ranks, False), run(ranks, True)
        print(f"| {ranks} | {plain:,} | {sharded:,} | {sharded / plain:.3f} |")


if __name__ == "__main__":
    main()
