"""The flight recorder's scenarios, one per run, started by test_flight_recorder.py as
`mpirun -np 3 python flight_scenarios.py NAME` with TFRING_FLIGHT_RECORDER_DIR set.

Every scenario first runs STEPS steps of allreduces on every rank, so that each rank's ring
holds finished collectives before the one that goes wrong. Each rank prints "rank R: ..."
lines that the test reads.
"""

import json
import os
import sys
import time

import tensorflow as tf

import tfring

STEPS = 5


def say(text):
    print(f"rank {tfring.rank()}: {text}", flush=True)


def steps():
    for i in range(STEPS):
        tfring.allreduce(tf.constant([1.0, 2.0]), name=f"step{i}")


def wait_in_python(seconds):
    time.sleep(seconds)  # the rank the job waits for: in Python, in no collective


def step_or_error(name, tensor):
    try:
        tfring.allreduce(tensor, name=name)
        say(f"{name}: no error")
    except tf.errors.OpError as e:
        say(f"{name}: caught {type(e).__name__}: {e.message}")


def blocked_in_python():
    # Rank 1 stays in Python past the stall shutdown (the test sets it to a few seconds)
    # while the others wait in 'step5'; every rank dumps when the stall stops tfring, rank
    # 1 too, from its runtime's thread, with its main thread's stack in wait_in_python.
    steps()
    if tfring.rank() == 1:
        wait_in_python(float(os.environ["FLIGHT_TEST_SLEEP"]))
    step_or_error("step5", tf.constant([1.0, 2.0]))


def skips_one():
    # Rank 1 skips 'step5' and goes on to 'step6'; the others wait in 'step5'.
    steps()
    if tfring.rank() != 1:
        step_or_error("step5", tf.constant([1.0, 2.0]))
    step_or_error("step6", tf.constant([1.0, 2.0]))


def signal_then_other_shape():
    # A healthy job, started by tfringrun: the test sends SIGUSR1 to tfringrun, which passes
    # it on (through mpirun) to every rank; each dumps, and goes on. Then rank 1 submits
    # 'step5' with another shape: the op fails on every rank (the runtime says so at once);
    # each rank dumps by hand, and the job goes on.
    steps()
    say("waiting for SIGUSR1")
    path = os.path.join(os.environ["TFRING_FLIGHT_RECORDER_DIR"], f"rank-{tfring.rank()}.json")
    deadline = time.time() + 120
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    with open(path) as f:
        dump = json.load(f)
    done = [e["name"] for e in dump["entries"] if e["status"] == "ok"]
    say(f"signal dump: {dump['reason']}; done: {' '.join(done)}; "
        f"stacks: {'signal_then_other_shape' in dump['python_stacks']}")
    step_or_error("step5", tf.zeros([2 + (tfring.rank() == 1)]))
    say(f"dumped {tfring.dump_flight_recorder()}")
    tfring.allreduce(tf.constant([1.0]), name="after")
    say("finished")


if __name__ == "__main__":
    tfring.init()
    say(f"started at {time.time():.3f}")
    globals()[sys.argv[1]]()
