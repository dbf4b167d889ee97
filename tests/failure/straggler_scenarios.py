"""The straggler report's job, started by test_straggler_report.py as
`mpirun -np 3 python straggler_scenarios.py` with TFRING_STRAGGLER_WINDOW_SECONDS=0.5 and
TFRING_STRAGGLER_REPORT_SECONDS=1. Each phase ends once a report newer than the phase has
reached every rank (settle); each rank prints "rank R: ..." lines that the test reads.

1. even: every rank works 30 ms before each allreduce: nobody is named;
2. every step: rank 1 alone works 50 ms before each allreduce (rank 0 writes a timeline);
3. once: rank 2 stops for 2 s before one allreduce;
4. Keras: a two-epoch fit with StragglerReportCallback, rank 1 slow in each batch.
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

import tfring


def say(text):
    print(f"rank {tfring.rank()}: {text}", flush=True)


def settle(label):
    """Allreduces (even, 0.1 s apart) until every rank holds a report made after this call
    began, then says it: whether to go on is agreed by an allreduce (the minimum over
    ranks), so that every rank leaves the loop in the same step."""
    before = tfring.straggler_report().get("windows", 0)
    for i in range(200):
        time.sleep(0.1)
        newer = tfring.straggler_report().get("windows", 0) >= before + 2
        if tfring.allreduce(tf.constant(1.0 if newer else 0.0), op=tfring.Min,
                            name="settle").numpy() == 1.0:
            break
    report = tfring.straggler_report()
    say(f"{label}: {json.dumps(report, sort_keys=True)}")
    return report


def steps(name, count, seconds_on):
    x = tf.constant([1.0, 2.0])
    for _ in range(count):
        time.sleep(seconds_on.get(tfring.rank(), 0.0))
        tfring.allreduce(x, name=name)


def keras_fit():
    import keras

    class SlowRank1(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if tfring.rank() == 1:
                time.sleep(0.05)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=tfring.keras.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss="mse")
    x = np.random.RandomState(0).rand(160, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0), SlowRank1(),
                         tfring.keras.callbacks.StragglerReportCallback(print_fn=say)])


if __name__ == "__main__":
    tfring.init()
    say(f"started at {time.time():.3f}")
    steps("even", 40, {0: 0.03, 1: 0.03, 2: 0.03})
    settle("even")
    timeline = os.environ["STRAGGLER_TEST_TIMELINE"]
    tfring.start_timeline(timeline)
    steps("slow", 30, {1: 0.05})
    settle("every step")
    tfring.stop_timeline()
    steps("once", 1, {2: 2.0})
    steps("after", 10, {})
    settle("once")
    import tfring.keras  # noqa: E402  (phase 4 only: Keras loads after the core's phases)
    keras_fit()
    say("finished")
    sys.stdout.flush()
