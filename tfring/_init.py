"""tfring.init: starts the runtime (tfring/_process/runtime.py), then registers Horovod's static
process sets (tfring/_ops/process_sets.py). It sits above both: process sets need the runtime's
rank and size, so the runtime cannot be the one to register them."""

import os
import socket
import warnings

from tfring._process import launch_check as _launch_check
from tfring._process import runtime
from tfring._elastic.members import MEMBERS, discovery_active
from tfring._ops.process_sets import add_process_set, is_registered

# What the running job was started on (init's `comm`): elastic training (tfring/_elastic/job.py)
# shrinks it to the ranks left after a worker is lost.
_job_comm = None


def job_communicator():
    """The `comm` tfring was last initialized with (None: MPI_COMM_WORLD)."""
    return _job_comm


def init(comm=None, process_sets=None):
    """Starts tfring in this process: MPI (unless already initialized) and the background thread.

    Call once per process, before any collective; calling it again while running is
    harmless. Every rank of the job must call it. Settings are read from the environment
    (TFRING_* variables, docs/settings.md) at this moment.

    Args:
        comm: which processes make up tfring's job, as Horovod's: None for all of
            MPI_COMM_WORLD; a list of MPI_COMM_WORLD ranks (every listed process calls init
            with the same list; its tfring rank is its position in the list); or an mpi4py
            communicator, which tfring duplicates, so the script's own messages on it never
            meet tfring's.
        process_sets: Horovod's static process sets (tfring.ProcessSet objects), checked
            against the job's size, or "dynamic". tfring needs no registration: any
            ProcessSet works in any op.

    Raises:
        ValueError: a bad `comm` (a rank that MPI_COMM_WORLD lacks, this process not in the
            list) or a malformed setting.
        RuntimeError: MPI could not be initialized; or the launcher started several
            processes that MPI sees one by one (plain `srun -n N`, another MPI's mpirun, a
            Slurm batch script of N tasks without srun): each would train alone, so every
            one refuses, saying what to run (docs/launching.md; TFRING_SINGLE_PROCESS=1
            runs one process on purpose).
    """
    global _job_comm
    if comm is None and discovery_active():
        # A worker an elastic job started to grow (tfring/_elastic/members.py) joins it.
        comm = MEMBERS.join_parent()
    runtime.start(comm)
    if comm is None:
        _check_against_the_launcher()
    _job_comm = comm
    if process_sets and process_sets != "dynamic":
        for ps in process_sets:
            # Registrations outlive shutdown(): a script that calls init again with the same
            # sets finds them registered, which is no duplicate.
            if not is_registered(ps):
                add_process_set(ps)


def _check_against_the_launcher():
    """Refuses a job that MPI sees as jobs of one process each while its launcher started
    several (tfring/_process/launch_check.py); warns where the ranks ignored the launcher's hostfile
    or left the other nodes of a Slurm allocation idle."""
    if runtime.size() == 1:
        problem = _launch_check.lone_process_problem(os.environ, runtime.mpi_version())
        if problem:
            runtime.shutdown()
            raise RuntimeError(f"tfring.init() refuses to start: {problem}")
    for check in (_launch_check.hostfile_problem, _launch_check.allocation_problem):
        problem = check(os.environ, runtime.size(), runtime.cross_size(), socket.gethostname())
        if problem and runtime.rank() == 0:
            warnings.warn(f"tfring: {problem}", RuntimeWarning, stacklevel=3)
