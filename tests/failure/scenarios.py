"""One failure scenario per run, started by test_failures.py as `mpirun -np 2 python scenarios.py NAME`.

Each rank prints "rank R: ..." lines that the test reads; exit codes are asserted there.
"""

import os
import signal
import sys
import threading
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


def _watch_own_stderr(text):
    """Sends this process's fd 2 (where the library logs) through a pipe that a thread copies
    back to it, watching for `text`. Returns (seen, done): an Event set once `text` has
    passed, and a function that puts fd 2 back and waits for the copy to finish."""
    original = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    seen = threading.Event()

    def copy():
        tail = b""
        while True:
            chunk = os.read(read_end, 65536)
            if not chunk:
                return
            os.write(original, chunk)
            tail = (tail + chunk)[-4096:]
            if text.encode() in tail:
                seen.set()

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()

    def done():
        sys.stderr.flush()
        os.dup2(original, 2)  # the pipe's last write end closes: the copier reads to its end
        copier.join(timeout=10)

    return seen, done


def _wait_for_file(path, timeout=60):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.02)


def killed_rank(late=False):
    """Rank 1 dies (SIGKILL) after a warm-up; rank 0's allreduce 'never_completes' must fail,
    naming the dead rank and the tensor. Which of tfring's two paths runs is fixed, not left
    to timing, and said:
    - pending (late=False): rank 1 dies only once rank 0's op is pending in tfring's
      negotiation, as the library itself reports it (the stall warning naming the op as
      submitted by rank 0 and missing on rank 1, TFRING_STALL_CHECK_TIME_SECONDS=1 set by
      the test); rank 0 then tells rank 1 through a file ($TFRING_TEST_FLAG_DIR).
    - late (late=True): rank 0 first waits until tfring has stopped (a probe op of its own
      fails: every op pending or submitted then fails with the same status, and tfring
      closes its intake before it fails any), then submits 'never_completes'."""
    flag = os.path.join(os.environ["TFRING_TEST_FLAG_DIR"], "pending")
    if not late and tfring.rank() == 0:
        seen, stderr_done = _watch_own_stderr(
            "'never_completes' (submitted by ranks [0], missing on ranks [1]")

        def tell_rank_1():
            seen.wait()
            with open(flag, "w"):
                pass

        threading.Thread(target=tell_rank_1, daemon=True).start()
    tfring.allreduce(tf.constant([1.0]), name="warmup")
    if tfring.rank() == 1:
        if not late:
            _wait_for_file(flag)
        say(f"killing myself at {time.time():.3f}")
        os.kill(os.getpid(), signal.SIGKILL)
    if late:
        try:
            tfring.allreduce(tf.constant([1.0]), name="probe")
            say("probe: no error")
        except tf.errors.OpError as e:
            say(f"path: tfring had stopped before 'never_completes' was submitted (the probe "
                f"failed: {type(e).__name__})")
    start = time.time()
    try:
        tfring.allreduce(tf.constant([1.0]), name="never_completes")
        say("no error")
    except tf.errors.OpError as e:
        if not late:
            say(f"path: 'never_completes' was pending when the failure was found (the "
                f"library's stall warning named it: {seen.is_set()})")
        say(f"caught after {time.time() - start:.1f} s: {e.message}")
        if not late:
            stderr_done()
        sys.exit(3)


def killed_rank_then_late_op():
    killed_rank(late=True)


def never_submits():
    # TFRING_STALL_SHUTDOWN_TIME_SECONDS is set by the test: rank 0 waits for 'lonely',
    # which rank 1 never submits; every rank's pending ops then fail with the same words,
    # and so do later ones. Rank 1's 'probe' (pending, stalled too) tells it that tfring has
    # stopped; only then does it submit 'later' (no sleep to outlast the shutdown time).
    if tfring.rank() == 0:
        try:
            tfring.allreduce(tf.constant([1.0]), name="lonely")
            say("no error")
        except tf.errors.AbortedError as e:
            say(f"caught {e.message}")
    else:
        try:
            tfring.allreduce(tf.constant([1.0]), name="probe")
            say("probe: no error")
        except tf.errors.AbortedError as e:
            say(f"probe caught {e.message}")
        try:
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
    pids = tfring.allgather_object(os.getpid(), name="pids")
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
        # The stopped rank stays a rank that never came back: mpirun's end of the job would
        # continue it (SIGCONT before its SIGTERM), and it would then fail and dump its flight
        # recorder too, or not, as the race goes.
        os.kill(pids[1], signal.SIGKILL)
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
    say(f"started at {time.time():.3f}")  # the job's own start, for the tests' time bounds
    globals()[sys.argv[1]]()
