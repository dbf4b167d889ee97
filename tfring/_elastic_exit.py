"""How an elastic worker's process ends: MPI_Finalize under a deadline.

After a worker was lost, Open MPI's fault tolerance can leave MPI_Finalize waiting for ever
on the dead process, now and then (open-mpi/ompi#11404; docs/elastic.md has what was seen).
It cannot simply be skipped: a worker that joined the job later (MPI_Comm_spawn) waits in
its own for its parents'. So every elastic worker finalizes at exit as before, and one still
waiting after TFRING_ELASTIC_FINALIZE_TIMEOUT seconds says so and ends.
"""

import atexit
import os
import sys
import threading

from tfring import _library, runtime

TIMEOUT = "TFRING_ELASTIC_FINALIZE_TIMEOUT"
_armed = False


def timeout_seconds(environ=os.environ):
    value = environ.get(TIMEOUT, "").strip()
    try:
        seconds = float(value) if value else 10.0
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ValueError(f"{TIMEOUT}={value!r}: expected seconds (a number, 0 or more)")
    return seconds


def finalize_within_deadline_at_exit():
    """Registers the deadline (once per process); elastic.run calls it before training."""
    global _armed
    if not _armed:
        # atexit runs the last registered first: this comes before tfring's own at-exit
        # (runtime.start's), which then finds nothing left to do.
        atexit.register(_finalize_within, timeout_seconds())
        _armed = True


def _exit_status():
    # Python sets sys.last_value when it prints an uncaught exception: it would exit with 1.
    return 1 if getattr(sys, "last_value", None) is not None else 0


def _finalize_within(seconds):
    def give_up():
        status = _exit_status()
        sys.stdout.flush()
        sys.stderr.write(
            f"tfring.elastic: MPI_Finalize did not return within {seconds:g} s ({TIMEOUT}); "
            "after a lost worker, Open MPI's fault tolerance can wait there for ever "
            f"(open-mpi/ompi#11404). This process ends now without it, with status {status}\n")
        sys.stderr.flush()
        os._exit(status)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()
    try:
        # tfring's shutdown, and MPI_Finalize where tfring initialized MPI (skipped there
        # after a peer was lost in a collective: no worker can have joined such a job).
        _library.capi().tfring_atexit()
        mpi = sys.modules.get("mpi4py.MPI")
        if runtime.mpi4py_owns_mpi() and mpi is not None and not mpi.Is_finalized():
            mpi.Finalize()  # what mpi4py's own at-exit would do, later and without a deadline
    finally:
        timer.cancel()
