"""How an elastic worker's process ends: MPI_Finalize under a deadline, or, when an exception
its code did not catch ends it, as a lost worker.

After a worker was lost, Open MPI's fault tolerance can leave MPI_Finalize waiting for ever
on the dead process, now and then (open-mpi/ompi#11404; docs/elastic.md has what was seen).
It cannot simply be skipped: a worker that joined the job later (MPI_Comm_spawn) waits in
its own for its parents'. So every elastic worker finalizes at exit as before, and one still
waiting after TFRING_ELASTIC_FINALIZE_TIMEOUT seconds says so and ends.

Under MPI's fault tolerance (mpirun --with-ft ulfm), a worker whose own code raised (an error
in its data, say) ends alone, as Horovod's does (its elastic tests' exit_mode='exception'):
the others go on without it. tfring's shutdown would tell them "shut down on rank R", which
stops their pending ops as a shutdown, and MPI_Finalize would wait for them; so that worker
leaves without either, and the others see it as lost through MPI's fault tolerance, as if it
had been killed.
"""

import atexit
import os
import signal
import sys

from tfring._process import library as _library
from tfring._process import runtime
from tfring._elastic.environment import FINALIZE_TIMEOUT as TIMEOUT
from tfring._elastic.environment import STATUS_DIR
_armed = False


class JobCannotGoOn(RuntimeError):
    """tfring.elastic stops the job (--min-np, --reset-limit, no fault tolerance). Raised on
    every worker alike, so each ends as a failed run (status 1), not as a lost worker that the
    others could go on without."""


class PeerHung(JobCannotGoOn):
    """A peer stopped answering without dying (MPI reports no failed process). MPI's shrink
    needs every live process, so the job cannot be re-formed without it, and under MPI's
    fault tolerance mpirun would wait for it for ever: the worker that raised this ends the
    whole job (MPI_Abort) at exit, which ends the hung process too."""


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


def _note_how_this_worker_ended(how):
    folder = os.environ.get(STATUS_DIR)
    if folder:
        try:
            with open(os.path.join(folder, f"{how}.{os.getpid()}"), "w"):
                pass
        except OSError:  # the note only sharpens tfringrun's status; the exit goes on
            pass


def _fault_tolerant(environ=os.environ):
    """Whether mpirun runs this job with MPI's fault tolerance (--with-ft ulfm, as tfringrun's
    elastic flags do). Without it a killed worker would make mpirun end every other at once,
    where tfring's shutdown gives each the error 'shut down on rank R' instead."""
    return environ.get("OMPI_MCA_mpi_ft_enable", "").strip().lower() in ("1", "true", "yes")


def _leave_as_lost():
    """Ends this process as a lost worker. Only a death by signal is one to Open MPI's fault
    tolerance: a process that exits with a status but without MPI_Finalize is never reported
    to the others (they waited out the peer timeout), so it kills itself."""
    who = f"rank {runtime.rank()}" if runtime.is_initialized() else "this worker"
    print(f"tfring.elastic: {who} ends on the exception above, as a lost worker, so "
          "that any others can go on without it", file=sys.stderr, flush=True)
    sys.stdout.flush()
    _note_how_this_worker_ended("lost")
    os.kill(os.getpid(), signal.SIGKILL)


def _abort_the_job():
    from mpi4py import MPI

    print("tfring.elastic: ends the whole job (MPI_Abort) on the error above: a hung worker "
          "would keep it waiting for ever", file=sys.stderr, flush=True)
    MPI.COMM_WORLD.Abort(1)


def _finalize_within(seconds):
    """tfring's own at-exit (its shutdown, and MPI_Finalize where tfring initialized MPI
    and lost no peer in a collective: no worker can have joined such a job), then mpi4py's
    MPI_Finalize where mpi4py initialized MPI (as mpi4py's own at-exit would, later), under
    the deadline. The library keeps the time on a thread of its own: mpi4py's Finalize
    holds Python's GIL while it waits, so no Python timer could."""
    status = _exit_status()
    sys.stdout.flush()
    if status != 0 and isinstance(sys.last_value, PeerHung):
        _abort_the_job()
    if status != 0 and _fault_tolerant() and not isinstance(sys.last_value, JobCannotGoOn):
        _leave_as_lost()
    if status == 0:
        _note_how_this_worker_ended("finished")
    message = (f"tfring.elastic: MPI_Finalize did not return within {seconds:g} s ({TIMEOUT}); "
               "after a lost worker, Open MPI's fault tolerance can wait there for ever "
               f"(open-mpi/ompi#11404). This process ends now without it, with status {status}")
    _library.capi().tfring_atexit_within(seconds, int(runtime.mpi4py_owns_mpi()), status,
                                         message.encode())
