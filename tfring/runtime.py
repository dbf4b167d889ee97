"""Process-level API: init/shutdown and where this process sits in the job."""

import atexit
import ctypes

from tfring import _library

# tfring's StatusCode values (kernels/common/status.h) -> the Python exception raised.
_INIT_ERRORS = {1: ValueError, 2: RuntimeError, 3: RuntimeError, 4: TimeoutError,
                5: ConnectionError, 6: RuntimeError}
_atexit_registered = False


def init(process_sets=None):
    """Starts tfring in this process: MPI (unless already initialized) and the background thread.

    Call once per process, before any collective; calling it again is harmless. Every rank of
    the job must call it. Settings are read from the environment (TFRING_* variables, see
    README) at this moment.

    Args:
        process_sets: Horovod's static process sets (tfring.ProcessSet objects); checked
            against the job's size. tfring needs no registration: any ProcessSet works.

    Raises:
        RuntimeError: MPI could not be initialized, or a setting is malformed (ValueError).
    """
    global _atexit_registered
    lib = _library.capi()
    error = ctypes.create_string_buffer(2048)
    code = lib.tfring_init(error, len(error))
    if code != 0:
        raise _INIT_ERRORS.get(code, RuntimeError)(f"tfring.init() failed: {error.value.decode()}")
    if not _atexit_registered:
        # Finalize MPI at exit: a rank that leaves without MPI_Finalize makes mpirun fail.
        atexit.register(lib.tfring_atexit)
        _atexit_registered = True
    if process_sets:
        from tfring.process_sets import add_process_set
        for ps in process_sets:
            add_process_set(ps)


def shutdown():
    """Stops the background thread on this rank (and, at its next cycle, on every rank).

    Ops still pending on any rank fail with an error saying tfring was shut down. `init()`
    may be called again afterwards. MPI itself is finalized when the process exits.
    """
    _library.capi().tfring_shutdown()


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline of every collective to `file_path` (rank 0).

    Open it in Perfetto (ui.perfetto.dev) or chrome://tracing; `python -m tfring.timeline
    summary FILE` totals the phases per tensor. Every rank may call this (as with Horovod);
    only rank 0 writes. Same as setting TFRING_TIMELINE (and TFRING_TIMELINE_MARK_CYCLES)
    before `init()`.

    Raises:
        ValueError: before `init()` (as RuntimeError), or when the file cannot be written.
    """
    error = ctypes.create_string_buffer(2048)
    code = _library.capi().tfring_start_timeline(str(file_path).encode(), int(bool(mark_cycles)),
                                                  error, len(error))
    if code != 0:
        raise _INIT_ERRORS.get(code, RuntimeError)(
            f"tfring.start_timeline() failed: {error.value.decode()}")


def stop_timeline():
    """Stops the timeline and closes its file (a valid JSON array). Harmless when none runs."""
    _library.capi().tfring_stop_timeline()


def is_initialized():
    """True between `init()` and `shutdown()`."""
    return bool(_library.capi().tfring_is_initialized())


def _layout(fn_name, what):
    value = getattr(_library.capi(), fn_name)()
    if value < 0:
        raise ValueError(f"tfring has not been initialized; call tfring.init() before asking "
                         f"for the {what}.")
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


def size_op(name=None):
    """A graph op whose value is `size()` when the graph runs."""
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
