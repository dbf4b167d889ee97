"""The elastic job (tfring.elastic.run): its limits (tfringrun's --min-np and
--reset-limit), how a lost worker is recognised, and the reset that follows, on MPI's own
fault tolerance (revoke and shrink, then tfring started again on the ranks left), or the
change of hosts the discovery asked for (tfring/_elastic/members.py). The job's state is
here and in members.py's MEMBERS: which communicator the job runs on, the resets done, who
the workers are."""

import functools
import os
import sys

import tensorflow as tf

from tfring import _init
from tfring._elastic import environment, process_end
from tfring._elastic.members import MEMBERS, discovery_active, timeout_seconds
from tfring._elastic.process_end import JobCannotGoOn, PeerHung
from tfring._ops import process_sets
from tfring._process import runtime
from tfring.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


def _lost_a_worker(error):
    """Whether `error` is tfring's failure for a lost peer: UnavailableError from a collective
    (or Horovod's HorovodInternalError), or, inside a tf.function (Keras's train step), the
    InternalError that TensorFlow turns it into (to keep it from its own network-error
    handling), told apart from other internal errors by the runtime's own record."""
    if isinstance(error, (tf.errors.UnavailableError, HorovodInternalError)):
        return True
    return isinstance(error, tf.errors.InternalError) and runtime.peer_lost()


class Limits:
    """tfringrun's --min-np and --reset-limit, which it passes on in the environment."""

    def __init__(self, environ=os.environ):
        self.min_np = self._read(environ, environment.MIN_NP)
        self.reset_limit = self._read(environ, environment.RESET_LIMIT)

    @staticmethod
    def _read(environ, key):
        value = environ.get(key, "").strip()
        if not value:
            return None
        if not value.isdigit():
            raise ValueError(f"{key}={value!r}: expected a whole number")
        return int(value)

    def check_reset_allowed(self, resets_done, why):
        """Horovod's --reset-limit counts every change of the job's size, up or down."""
        if self.reset_limit is not None and resets_done >= self.reset_limit:
            raise JobCannotGoOn(
                f"tfring.elastic: the job's workers changed again after {resets_done} "
                f"reset(s), and --reset-limit {self.reset_limit} allows no more; the job "
                f"stops here. What changed: {why}") from (
                    why if isinstance(why, BaseException) else None)

    def check_enough_workers(self, left, waited=None):
        if self.min_np is not None and left < self.min_np:
            wait = ("no worker can join (no --host-discovery-script), so there is nothing "
                    "to wait for" if waited is None else
                    f"no host offered more within --elastic-timeout {waited} s")
            raise JobCannotGoOn(
                f"tfring.elastic: {left} worker(s) are left and --min-np needs {self.min_np}; "
                f"the job cannot go on ({wait})")


def agree(step, comm=None):
    """Runs `step(comm)` (mpi4py messages; on the job's communicator by default); a lost
    worker there becomes HorovodInternalError, as a lost worker in a collective is."""
    from mpi4py import MPI

    try:
        return step(comm if comm is not None else _job_comm())
    except MPI.Exception as e:
        raise HorovodInternalError(f"a worker was lost while the workers agreed on the "
                                   f"job's hosts: {e}") from e


def _job_comm():
    from mpi4py import MPI

    comm = _init.job_communicator()
    if comm is None:
        return MPI.COMM_WORLD
    if not hasattr(comm, "Shrink"):
        raise RuntimeError("elastic training needs tfring.init() or tfring.init(comm=<an mpi4py "
                           "communicator>), not a list of ranks")
    return comm


# A communicator tfring failed to start on because a worker was lost meanwhile: the next
# re-forming revokes and shrinks it, not the job's older one, so no survivor stays blocked in
# its start.
_failed_start = None


def _restart_on(comm):
    global _failed_start
    try:
        _init.init(comm=comm)
    except (RuntimeError, ConnectionError) as e:
        if not _lost_members(comm):
            raise
        _failed_start = comm
        raise HorovodInternalError(f"a worker was lost while tfring started again: {e}") from e
    process_sets.new_world()


def _lost_members(comm):
    """Whether MPI knows of a process of `comm` that failed (ULFM)."""
    from mpi4py import MPI

    try:
        return comm.Get_failed().Get_size() > 0
    except (AttributeError, NotImplementedError, MPI.Exception):  # an MPI without ULFM
        return False


def _reset_after_loss(limits):
    """Starts tfring again on the ranks still alive (MPI fault tolerance: revoke, shrink);
    below --min-np, waits for the host discovery to offer enough new workers."""
    from mpi4py import MPI

    global _failed_start
    comm, _failed_start = (_failed_start or _job_comm()), None
    old_labels = MEMBERS.labels if MEMBERS.labels_comm is comm else None
    runtime.shutdown_for_reset()
    try:
        comm.Revoke()
        alive = comm.Shrink()
    except (NotImplementedError, MPI.Exception) as e:
        raise JobCannotGoOn("a worker was lost and the job cannot be re-formed without MPI's "
                           "fault tolerance: run under `mpirun --with-ft ulfm` (Open MPI 5) "
                           f"({e})") from e
    alive.Set_errhandler(MPI.ERRORS_RETURN)
    if not discovery_active():
        limits.check_enough_workers(alive.Get_size())
    else:
        MEMBERS.note_shrink(old_labels, alive)
        if limits.min_np is not None and alive.Get_size() < limits.min_np:
            waited = timeout_seconds()
            if MEMBERS.agree_on_update(alive, min_workers=limits.min_np, timeout=waited)["add"]:
                alive = MEMBERS.grow(alive)
            limits.check_enough_workers(alive.Get_size(), waited)
    _restart_on(alive)


def _leave_process():
    """Ends a worker the job no longer has. Not sys.exit: the script's code after run()
    would take training for finished. Not MPI's finalize either: it would wait for the whole
    job's end (spinning), and in a worker that joined later it hangs the job's end. Under
    --with-ft ulfm mpirun takes the exit calmly; for a worker that joined later (another MPI
    job to Open MPI) it ends with status 1 in the end, 'exiting improperly' (docs/elastic.md)."""
    os._exit(0)


def _change_hosts():
    """Carries out the plan the last check_host_updates agreed on: the ranks on hosts the
    discovery no longer offers leave (their processes end here), then the new workers start
    and join; tfring starts again on the job so made (the ranks kept keep their order; the
    new ones follow)."""
    me = runtime.rank()
    runtime.shutdown_for_reset()
    comm = agree(MEMBERS.leave) if MEMBERS.pending["leave"] else _job_comm()
    if comm is None:
        print(f"tfring.elastic: the host discovery no longer offers the slot of rank {me} on "
              f"{MEMBERS.my_label}; it leaves the job and its process ends", flush=True)
        sys.stderr.flush()
        _leave_process()
    if MEMBERS.pending["add"]:
        comm = agree(MEMBERS.grow, comm)
    _restart_on(comm)


def run(func):
    """Decorator: runs `func(state, ...)` until it returns, through lost and new workers
    (above)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        limits = Limits()
        process_end.finalize_within_deadline_at_exit()
        resets = 0
        reset = None
        skip_sync = False
        while True:
            try:
                # Inside the try: a worker lost while the job re-forms, in a reset callback's
                # collective or at the sync rolls back and re-forms once more, as a loss
                # during training does.
                if reset is not None:
                    reset()
                    reset = None
                    resets += 1
                    state.on_reset()
                if not skip_sync:
                    # --reset-limit counts the job's resets, not this process's: a worker
                    # that has just joined (at this same sync) takes rank 0's count.
                    resets = state._bcast_object(resets)
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                # Every worker raised it at the same commit: nothing to roll back.
                limits.check_reset_allowed(resets, e)
                reset, skip_sync = _change_hosts, e.skip_sync
            except (tf.errors.OpError, HorovodInternalError) as e:
                if not _lost_a_worker(e):
                    raise
                if isinstance(e, tf.errors.OpError) and not _lost_members(_job_comm()):
                    # tfring's peer timeout, with every process alive: one has hung.
                    raise PeerHung(f"tfring.elastic: a worker stopped answering but MPI "
                                   f"reports no failed process, so the job cannot be re-formed "
                                   f"without it; the job stops ({e.message})") from e
                limits.check_reset_allowed(resets, e)
                state.restore()
                reset, skip_sync = functools.partial(_reset_after_loss, limits), False

    return wrapper
