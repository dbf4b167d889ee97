"""What the always-on diagnostics cost: a small eager allreduce and a Keras training step
with tfring's defaults (the flight recorder, TFRING_FLIGHT_RECORDER_ENTRIES=1024, and the
straggler watch, TFRING_STRAGGLER_WINDOW_SECONDS=1), with each turned off (0) and with both
off, interleaved in one job (tfring started again between rounds), ranks bound to cores.

    python bench/diagnostics_cost.py [--np 2] [--rounds 6] [--settings defaults,both off]

Prints each setting's median over rounds of: microseconds per eager allreduce of 4 floats
(unnamed, as users write it; 40000 calls a round, over a second, so that the straggler
watch's exchanges, one a second, fall inside), and milliseconds per step of a small Keras
model.fit (tfring.keras.DistributedOptimizer, batch 32, 600 steps a round, after an epoch of
warm-up), the slowest rank's figure each round. The settings' order rotates from round to
round.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

SETTINGS = {
    "defaults": {},
    "recorder off": {"TFRING_FLIGHT_RECORDER_ENTRIES": "0"},
    "watch off": {"TFRING_STRAGGLER_WINDOW_SECONDS": "0"},
    "both off": {"TFRING_FLIGHT_RECORDER_ENTRIES": "0", "TFRING_STRAGGLER_WINDOW_SECONDS": "0"},
}
KNOBS = ("TFRING_FLIGHT_RECORDER_ENTRIES", "TFRING_STRAGGLER_WINDOW_SECONDS")


def worker(rounds, chosen):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    import keras

    import tfring
    import tfring.keras as hvd_keras

    x = np.random.RandomState(0).rand(32 * 40, 16).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 8).astype(np.float32)
    names = [name for name in SETTINGS if name in chosen]
    results = {name: {"allreduce_us": [], "step_ms": []} for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for knob in KNOBS:
                os.environ.pop(knob, None)
            os.environ.update(SETTINGS[name])
            tfring.init()
            t = tf.constant([1.0, 2.0, 3.0, 4.0])
            for _ in range(200):
                tfring.allreduce(t)
            calls = 40000
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
            model.fit(x, y, batch_size=32, epochs=15, verbose=0)
            mine = (time.perf_counter() - start) / 600 * 1e3
            results[name]["step_ms"].append(
                float(tfring.allreduce(tf.constant(mine), op=tfring.Max)))
            tfring.shutdown()
    if int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == 0:
        for name, figures in results.items():
            print(f"{name}: allreduce {statistics.median(figures['allreduce_us']):.1f}"
                  f" us, Keras step {statistics.median(figures['step_ms']):.2f} ms "
                  f"(medians of {rounds}; rounds: "
                  f"{', '.join(f'{v:.1f}' for v in figures['allreduce_us'])} us; "
                  f"{', '.join(f'{v:.2f}' for v in figures['step_ms'])} ms)", flush=True)
        # Each round runs every setting, so a round's ratio cancels what the machine did in
        # that round: the median of those is steadier than a ratio of medians.
        base = names[0]
        for name in names[1:]:
            ratios = [statistics.median(a / b for a, b in zip(results[base][k], results[name][k]))
                      for k in ("allreduce_us", "step_ms")]
            print(f"{base} / {name}, median of the rounds' ratios: allreduce {ratios[0]:.3f}, "
                  f"Keras step {ratios[1]:.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help="which of them, comma-separated (default: all four)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    chosen = args.settings.split(",")
    unknown = [name for name in chosen if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {list(SETTINGS)}")
    if args.worker:
        return worker(args.rounds, chosen)
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.call([mpirun, "-np", str(args.np), "--bind-to", "core", sys.executable,
                            os.path.abspath(__file__), "--worker", "--rounds",
                            str(args.rounds), "--settings", args.settings], env=env)


if __name__ == "__main__":
    sys.exit(main())
