"""One failure scenario per run, started by test_failures.py as `mpirun -np 2 python scenarios.py NAME`.

Each rank prints "rank R: ..." lines that the test reads; exit codes are asserted there.
"""

import os
import signal
import sys
import time

import tensorflow as tf

import tfring


def say(text):
    print(f"rank {tfring.rank()}: {text}", flush=True)


def mismatch():
    try:
        tfring.allreduce(tf.zeros([2 + tfring.rank(), 3]), name="grad/dense_1")
        say("no error")
    except tf.errors.FailedPreconditionError as e:
        say(f"caught {e.message}")
    # The runtime is still usable afterwards.
    say(f"after {tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name='after').numpy()[0]}")


def killed_rank(late=False):
    tfring.allreduce(tf.constant([1.0]), name="warmup")
    if tfring.rank() == 1:
        say(f"killing myself at {time.time():.3f}")
        os.kill(os.getpid(), signal.SIGKILL)
    if late:
        time.sleep(2)  # tfring's own cycle finds the dead peer before the op is submitted
    start = time.time()
    try:
        tfring.allreduce(tf.constant([1.0]), name="never_completes")
        say("no error")
    except tf.errors.OpError as e:
        say(f"caught after {time.time() - start:.1f} s: {e.message}")
        sys.exit(3)


def killed_rank_then_late_op():
    killed_rank(late=True)


def never_submits():
    # TFRING_STALL_SHUTDOWN_TIME_SECONDS is set by the test: rank 0 waits for 'lonely',
    # which rank 1 never submits; every rank's pending ops then fail with the same words.
    if tfring.rank() == 0:
        try:
            tfring.allreduce(tf.constant([1.0]), name="lonely")
            say("no error")
        except tf.errors.AbortedError as e:
            say(f"caught {e.message}")
    else:
        try:
            time.sleep(8)
            tfring.allreduce(tf.constant([1.0]), name="later")
            say("no error")
        except tf.errors.AbortedError as e:
            say(f"caught {e.message}")


def extra_unnamed_call():
    # Rank 0 makes one unnamed eager call more than rank 1, which goes on to a named op: the
    # two wait on each other. Both calls fail within seconds, each rank's error naming both
    # calls; the ranks' later unnamed calls pair again.
    tfring.allreduce(tf.constant([1.0]))
    start = time.time()
    try:
        if tfring.rank() == 0:
            tfring.allreduce(tf.constant([2.0]))  # the extra call
        else:
            tfring.allreduce(tf.constant([3.0]), name="named_elsewhere")
        say("no error")
    except tf.errors.FailedPreconditionError as e:
        say(f"caught after {time.time() - start:.0f} s: {e.message}")
    for i in range(3):
        total = tfring.allreduce(tf.constant([float(i + tfring.rank())]), op=tfring.Sum)
        say(f"then {total.numpy()[0]:g}")


def peer_timeout():
    # A rank that stops its background thread's answers without dying (SIGSTOP) is caught
    # by TFRING_PEER_TIMEOUT_SECONDS, set low by the test.
    tfring.allreduce(tf.constant([1.0]), name="warmup")
    if tfring.rank() == 1:
        say("stopping myself")
        os.kill(os.getpid(), signal.SIGSTOP)
    start = time.time()
    try:
        tfring.allreduce(tf.constant([1.0]), name="never_completes")
        say("no error")
    except tf.errors.UnavailableError as e:
        say(f"caught after {time.time() - start:.1f} s: {e.message}")
        sys.stdout.flush()
        os._exit(4)


def reinit_after_killed_rank():
    """3 ranks under ULFM: rank 2 dies; the others see their op fail, shrink MPI_COMM_WORLD
    to the ranks still alive, and start tfring again on that communicator."""
    from mpi4py import MPI

    me = tfring.rank()
    tfring.allreduce(tf.constant([1.0]), name="warmup")
    if me == 2:
        say(f"killing myself at {time.time():.3f}")
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        tfring.allreduce(tf.constant([1.0]), name="never_completes")
        say("no error")
    except tf.errors.OpError as e:
        say(f"caught {type(e).__name__}")
    tfring.shutdown()
    try:
        tfring.init()  # MPI_COMM_WORLD still holds the dead rank
        print(f"rank {me}: init() again on every rank succeeded", flush=True)
    except RuntimeError as e:
        print(f"rank {me}: refused: {e}", flush=True)
    world = MPI.COMM_WORLD
    world.Revoke()
    alive = world.Shrink()
    start = time.time()
    tfring.init(comm=alive)
    total = tfring.allreduce(tf.constant([float(me + 1)]), op=tfring.Sum, name="after").numpy()[0]
    print(f"rank {me}: re-formed as rank {tfring.rank()} of {tfring.size()} in "
          f"{time.time() - start:.2f} s: sum {total}", flush=True)
    tfring.shutdown()


if __name__ == "__main__":
    tfring.init()
    globals()[sys.argv[1]]()
