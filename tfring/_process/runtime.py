"""Process-level API: init/shutdown and where this process sits in the job."""

import atexit
import ctypes
import enum
import os
import sys

from tfring._process import flight_dump, gpu_libraries
from tfring._process import library as _library
from tfring._process import mpi_wheel


class StatusCode(enum.IntEnum):
    """The runtime's status codes (kernels/common/status.h; a unit test checks the values
    against the library's own names)."""
    OK = 0
    INVALID_ARGUMENT = 1
    FAILED_PRECONDITION = 2
    ABORTED = 3
    DEADLINE_EXCEEDED = 4
    UNAVAILABLE = 5
    INTERNAL = 6


# What init() and start_timeline() raise for each failing code (the ops raise TensorFlow's
# errors instead, mapped in kernels/tf/adapter.cc).
_INIT_ERRORS = {
    StatusCode.INVALID_ARGUMENT: ValueError,
    StatusCode.FAILED_PRECONDITION: RuntimeError,
    StatusCode.ABORTED: RuntimeError,
    StatusCode.DEADLINE_EXCEEDED: TimeoutError,
    StatusCode.UNAVAILABLE: ConnectionError,
    StatusCode.INTERNAL: RuntimeError,
}
_atexit_registered = False
# Whether mpi4py had initialized MPI before tfring first started: then mpi4py, not tfring,
# calls MPI_Finalize at exit (tfring/_elastic/process_end.py needs to know which).
_mpi4py_owns_mpi = None


def start(comm=None):
    """Starts the runtime in this process (tfring.init's first half, tfring/_init.py): MPI
    unless already initialized, and the background thread, on the ranks `comm` names."""
    global _atexit_registered, _mpi4py_owns_mpi
    lib = _library.capi()
    if _mpi4py_owns_mpi is None:
        mpi = sys.modules.get("mpi4py.MPI")
        _mpi4py_owns_mpi = mpi is not None and mpi.Is_initialized()
    kind, ranks, handle = _world_choice(comm)
    # Before MPI starts: Slurm's srun does not tell the wheel's Open MPI where it lives.
    mpi_wheel.point_at_wheel(os.environ, _library.build_info().get("mpicxx"),
                              mpi_wheel.wheel_prefix())
    if nccl_built():
        # Loads NCCL and the CUDA runtime, and raises where TensorFlow has GPUs that tfring's
        # GPU path cannot serve: before MPI and the background thread start, so that nothing
        # is left running.
        gpu_libraries.check(_tensorflow_gpus)
    error = ctypes.create_string_buffer(2048)
    code = lib.tfring_init(kind, (ctypes.c_int32 * max(1, len(ranks)))(*ranks), len(ranks),
                           handle, error, len(error))
    if code != 0:
        raise _INIT_ERRORS.get(code, RuntimeError)(f"tfring.init() failed: {error.value.decode()}")
    lib.tfring_log_gpu_libraries()  # at debug level, now that init set it: the files in use
    flight_dump.serve_stacks()
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True


def _tensorflow_gpus():
    """How many GPUs TensorFlow sees (asked only when tfring's GPU path has a problem)."""
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def _at_exit():
    """Finalizes MPI at exit: a rank that leaves without MPI_Finalize makes mpirun fail.

    MPI_Finalize waits for every rank to call it. After a stall shutdown or a backend's
    failure, a rank blocked outside tfring (in Python: a sleep, data loading, a deadlock of
    its own) may never get there, and the ranks that failed would wait in MPI_Finalize for
    as long as it stays blocked. So, then, each waits at most TFRING_PEER_TIMEOUT_SECONDS
    (a peer silent that long is lost: docs/hangs-and-stragglers.md, 'When the job ends') and
    then exits with status 1 without it, which has mpirun (srun with --kill-on-bad-exit=1)
    end the ranks still running (with 0 there, it waits for ever). Ranks that all exit in that time
    finalize as usual. (After a lost peer
    tfring never finalizes; an elastic worker's end is tfring/_elastic/process_end.py's.)
    """
    lib = _library.capi()
    seconds = lib.tfring_peer_timeout_seconds()  # 0: wait for ever, as for a peer
    if not lib.tfring_stopped_on_failure() or seconds <= 0:
        lib.tfring_atexit()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    who = f"rank {rank()}" if lib.tfring_rank() >= 0 else "this rank"
    message = (f"[tfring] {who}: tfring stopped on a failure (the error above), and MPI_Finalize "
               f"waited {seconds:g} s (TFRING_PEER_TIMEOUT_SECONDS) for ranks that did not "
               "exit (one blocked outside tfring, in Python, say); this rank exits now without "
               "it, with status 1, so that the launcher ends the ranks still running")
    lib.tfring_atexit_within(seconds, int(mpi4py_owns_mpi()), 1, message.encode())


def mpi4py_owns_mpi():
    """Whether mpi4py initialized MPI (imported before tfring first started), and so
    finalizes it at exit; else tfring does (unless a peer was lost)."""
    return bool(_mpi4py_owns_mpi)


def _world_choice(comm):
    """(kind, ranks, Fortran handle) for the C API's tfring_init (c_api.cc)."""
    if comm is None:
        return 0, [], 0
    if isinstance(comm, (list, tuple)):
        ranks = [int(r) for r in comm]
        if not ranks or len(set(ranks)) != len(ranks):
            raise ValueError(f"init(comm=...): a list of distinct MPI_COMM_WORLD ranks is "
                             f"needed; got {list(comm)}")
        return 1, ranks, 0
    if hasattr(comm, "py2f"):  # an mpi4py communicator
        return 2, [], int(comm.py2f())
    raise TypeError(f"init(comm=...) takes None, a list of ranks or an mpi4py communicator; "
                    f"got {type(comm).__name__}")


def shutdown():
    """Stops the background thread on this rank (and, at its next cycle, on every rank).

    Ops still pending on any rank fail with an error saying tfring was shut down. `init()`
    may be called again afterwards. MPI itself is finalized when the process exits.
    """
    _library.capi().tfring_shutdown()


def shutdown_for_reset():
    """shutdown() before an elastic reset (tfring._elastic): the NCCL world communicator is
    left for the next runtime to keep, shrink or grow (docs/elastic.md, 'GPU tensors')
    instead of freed."""
    _library.capi().tfring_shutdown_for_reset()


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline of every collective to `file_path` (rank 0).

    Open it in Perfetto (ui.perfetto.dev) or chrome://tracing; `python -m tfring.timeline
    summary FILE` totals the phases per tensor. Every rank may call this (as with Horovod);
    only rank 0 writes. Same as setting TFRING_TIMELINE (and TFRING_TIMELINE_MARK_CYCLES)
    before `init()`.

    Raises:
        ValueError: before `init()` (as Horovod).
        RuntimeError: when the file cannot be written, or a timeline is already running.
    """
    if not is_initialized():
        raise not_initialized("start_timeline()")
    error = ctypes.create_string_buffer(2048)
    code = _library.capi().tfring_start_timeline(str(file_path).encode(), int(bool(mark_cycles)),
                                                  error, len(error))
    if code != 0:
        raise _INIT_ERRORS.get(code, RuntimeError)(
            f"tfring.start_timeline() failed: {error.value.decode()}")


def stop_timeline():
    """Stops the timeline and closes its file (a valid JSON array). Harmless when none runs;
    a ValueError before `init()`, as Horovod."""
    if not is_initialized():
        raise not_initialized("stop_timeline()")
    _library.capi().tfring_stop_timeline()


def is_initialized():
    """True between `init()` and `shutdown()`."""
    return bool(_library.capi().tfring_is_initialized())


def peer_lost():
    """True when the running runtime lost a peer (one died or stopped answering) and failed
    its collectives for that; False before init() and after shutdown()."""
    return bool(_library.capi().tfring_peer_lost())


def not_initialized(what):
    """The ValueError (Horovod's type) for `what` asked before `init()`, with the library's
    own message (common/status.h, NotInitialized)."""
    out = ctypes.create_string_buffer(1024)
    _library.capi().tfring_not_initialized_message(what.encode(), out, len(out))
    return ValueError(out.value.decode())


def stale_process_set_message(ranks, what):
    """The library's words (core/message.h, StaleProcessSetMessage) for a process set made
    before tfring.elastic renumbered the ranks, used by `what`."""
    out = ctypes.create_string_buffer(2048)
    array = (ctypes.c_int32 * len(ranks))(*ranks)
    _library.capi().tfring_stale_process_set_message(array, len(ranks), what.encode(), out,
                                                     len(out))
    return out.value.decode()


def set_process_set_world(world):
    """Tells the library how many times the ranks were renumbered (process_sets.new_world):
    its kernels refuse an op whose process set was made before."""
    _library.capi().tfring_set_process_set_world(int(world))


def _layout(fn_name, what):
    value = getattr(_library.capi(), fn_name)()
    if value < 0:
        raise not_initialized(f"asking for the {what}")
    return value


def size():
    """Number of ranks in the job."""
    return _layout("tfring_size", "size")


def rank():
    """This process's rank, in [0, size())."""
    return _layout("tfring_rank", "rank")


def local_size():
    """Number of ranks on this host."""
    return _layout("tfring_local_size", "local size")


def local_rank():
    """This process's rank among the ranks on its host."""
    return _layout("tfring_local_rank", "local rank")


def cross_size():
    """Number of hosts (precisely: of ranks that share this process's local rank)."""
    return _layout("tfring_cross_size", "cross size")


def cross_rank():
    """This host's index among hosts (among ranks with the same local rank)."""
    return _layout("tfring_cross_rank", "cross rank")


def mpi_threads_supported():
    """True when MPI was initialized with MPI_THREAD_MULTIPLE (requires `init()`)."""
    _layout("tfring_size", "MPI thread support")
    return bool(_library.capi().tfring_mpi_threads_supported())


def mpi_built():
    """True: this build has the MPI backend (for host tensors)."""
    return bool(_library.build_info()["mpi"])


def nccl_built():
    """True when this build has the NCCL backend (for GPU tensors)."""
    return bool(_library.build_info()["nccl"])


def mpi_version():
    """The MPI library's version line, e.g. 'Open MPI v5.0.11'."""
    out = ctypes.create_string_buffer(512)
    _library.capi().tfring_mpi_version(out, len(out))
    return out.value.decode()


def job_size_op(name=None):
    """A graph op whose value is `size()` when the graph runs (tfring.size_op of the global
    set, tfring/_ops/process_sets.py)."""
    return _library.ops().tfring_size(name=name)


def rank_op(name=None):
    """A graph op whose value is `rank()` when the graph runs."""
    return _library.ops().tfring_rank(name=name)


def local_size_op(name=None):
    """A graph op whose value is `local_size()` when the graph runs."""
    return _library.ops().tfring_local_size(name=name)


def local_rank_op(name=None):
    """A graph op whose value is `local_rank()` when the graph runs."""
    return _library.ops().tfring_local_rank(name=name)


# What this build has, by Horovod's names. tfring always talks MPI (host tensors) and, where
# built with NCCL, NCCL for CUDA GPU tensors; it has no Gloo, oneCCL, DDL or ROCm path.

def mpi_enabled():
    """Whether MPI carries tfring's collectives: always, in this build."""
    return mpi_built()


def cuda_built():
    """Whether the CUDA (GPU) path was compiled: the NCCL executor needs it."""
    return nccl_built()


def gloo_built():
    """Gloo is not built: tfring's collectives go through MPI (and NCCL)."""
    return False


def gloo_enabled():
    """Gloo is never in use: tfring's collectives go through MPI (and NCCL)."""
    return False


def ccl_built():
    """oneCCL is not built into tfring."""
    return False


def ddl_built():
    """IBM DDL is not built into tfring."""
    return False


def rocm_built():
    """ROCm (AMD GPUs) is not built into tfring."""
    return False


def sycl_built():
    """SYCL (Intel GPUs; Horovod's examples after 0.28 ask) is not built into tfring."""
    return False


def is_homogeneous():
    """Whether every host runs the same number of ranks (Horovod's definition)."""
    return size() == local_size() * cross_size()
