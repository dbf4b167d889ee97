"""What the flight recorder costs: a small eager allreduce and a Keras training step, with
the recorder on (TFRING_FLIGHT_RECORDER_ENTRIES=1024, the default) and off (0), interleaved
in one job (tfring started again between rounds), ranks bound to cores.

    python bench/flight_recorder.py [--np 2] [--rounds 10]

Prints each setting's median over rounds of: microseconds per eager allreduce of 4 floats
(unnamed, as users write it; 5000 calls a round), and milliseconds per step of a small
Keras model.fit (tfring.keras.DistributedOptimizer, batch 32, 200 steps a round, after an
epoch of warm-up), the slowest rank's figure each round. The order of the two settings
alternates from round to round.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

SETTINGS = {"on": "1024", "off": "0"}


def worker(rounds):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    import keras

    import tfring
    import tfring.keras as hvd_keras

    x = np.random.RandomState(0).rand(32 * 40, 16).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 8).astype(np.float32)
    results = {name: {"allreduce_us": [], "step_ms": []} for name in SETTINGS}
    for r in range(rounds):
        for name, entries in (list(SETTINGS.items()) if r % 2 == 0 else
                              list(reversed(SETTINGS.items()))):
            os.environ["TFRING_FLIGHT_RECORDER_ENTRIES"] = entries
            tfring.init()
            t = tf.constant([1.0, 2.0, 3.0, 4.0])
            for _ in range(200):
                tfring.allreduce(t)
            calls = 5000
            start = time.perf_counter()
            for _ in range(calls):
                tfring.allreduce(t)
            mine = (time.perf_counter() - start) / calls * 1e6
            results[name]["allreduce_us"].append(
                float(tfring.allreduce(tf.constant(mine), op=tfring.Max)))
            model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, "relu"),
                                      keras.layers.Dense(1)])
            model.compile(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.01)), "mse")
            model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # warm-up: tracing
            start = time.perf_counter()
            model.fit(x, y, batch_size=32, epochs=5, verbose=0)
            mine = (time.perf_counter() - start) / 200 * 1e3
            results[name]["step_ms"].append(
                float(tfring.allreduce(tf.constant(mine), op=tfring.Max)))
            tfring.shutdown()
    if int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == 0:
        for name, figures in results.items():
            print(f"recorder {name}: allreduce {statistics.median(figures['allreduce_us']):.1f}"
                  f" us, Keras step {statistics.median(figures['step_ms']):.2f} ms "
                  f"(medians of {rounds}; rounds: "
                  f"{', '.join(f'{v:.1f}' for v in figures['allreduce_us'])} us; "
                  f"{', '.join(f'{v:.2f}' for v in figures['step_ms'])} ms)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.rounds)
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.call([mpirun, "-np", str(args.np), "--bind-to", "core", sys.executable,
                            os.path.abspath(__file__), "--worker", "--rounds",
                            str(args.rounds)], env=env)


if __name__ == "__main__":
    sys.exit(main())
