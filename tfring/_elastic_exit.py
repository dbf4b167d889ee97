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
    """tfring's own at-exit (its shutdown, and MPI_Finalize where tfring initialized MPI
    and lost no peer in a collective: no worker can have joined such a job), then mpi4py's
    MPI_Finalize where mpi4py initialized MPI (as mpi4py's own at-exit would, later), under
    the deadline. The library keeps the time on a thread of its own: mpi4py's Finalize
    holds Python's GIL while it waits, so no Python timer could."""
    status = _exit_status()
    sys.stdout.flush()
    message = (f"tfring.elastic: MPI_Finalize did not return within {seconds:g} s ({TIMEOUT}); "
               "after a lost worker, Open MPI's fault tolerance can wait there for ever "
               f"(open-mpi/ompi#11404). This process ends now without it, with status {status}")
    _library.capi().tfring_atexit_within(seconds, int(runtime.mpi4py_owns_mpi()), status,
                                         message.encode())
