"""Loads tfring's compiled library once, building it first when it is missing or stale
(tfring/build/on_import.py).

The library (the TensorFlow ops and the C API beside them) lives in this environment's build
entry (`toolchain.entry_dir()`: one folder per TensorFlow, MPI, NCCL and Python, under
TFRING_CACHE_DIR, a checkout's build/ or ~/.cache/tfring).
"""

import ctypes
import functools
import os

from tfring.build import on_import, toolchain


@functools.lru_cache(maxsize=None)
def entry():
    """This environment's build folder."""
    try:
        return toolchain.entry_dir()
    except toolchain.BuildError as e:
        raise ImportError(on_import.failure_text(str(e), e.section)) from None


def library_path():
    return os.path.join(entry(), toolchain.LIBRARY_NAME)


@functools.lru_cache(maxsize=None)
def build_info():
    """What the library was built with: TensorFlow version, MPI, NCCL, where (a dict)."""
    ensure_built()
    return toolchain.read_record(entry())


@functools.lru_cache(maxsize=None)
def ensure_built():
    """Builds the library first where it is missing or stale (once per process)."""
    import tensorflow as tf

    on_import.ensure_built(entry(), tf.__version__)


@functools.lru_cache(maxsize=None)
def ops():
    """The module of generated op wrappers (tf.load_op_library)."""
    import tensorflow as tf

    from tfring._process import autodeps

    ensure_built()
    check_tensorflow_version(build_info()["tensorflow"], tf.__version__)
    module = tf.load_op_library(library_path())
    autodeps.allow_unordered_collectives()
    return module


def check_tensorflow_version(built, installed):
    """Raises ImportError when the library was built for another TensorFlow."""
    if built != installed:
        raise ImportError(
            f"tfring's ops were built against TensorFlow {built} but TensorFlow {installed} "
            f"is installed. Rebuild them with: {on_import.REBUILD_COMMAND}")


@functools.lru_cache(maxsize=None)
def capi():
    """The C API (tfring/kernels/runtime/c_api.cc) of the same, already loaded, library."""
    ops()  # the TF check and load come first; dlopen then returns the same handle
    lib = ctypes.CDLL(library_path(), mode=ctypes.RTLD_GLOBAL)
    lib.tfring_init.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                ctypes.c_int64, ctypes.c_char_p, ctypes.c_int]
    lib.tfring_mpi_version.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.tfring_not_initialized_message.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                                   ctypes.c_int]
    lib.tfring_start_timeline.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                          ctypes.c_int]
    lib.tfring_atexit_within.argtypes = [ctypes.c_double, ctypes.c_int, ctypes.c_int,
                                         ctypes.c_char_p]
    lib.tfring_set_process_set_world.argtypes = [ctypes.c_int64]
    lib.tfring_straggler_report.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.tfring_gpu_libraries.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.tfring_peer_timeout_seconds.restype = ctypes.c_double
    lib.tfring_stale_process_set_message.argtypes = [
        ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
        ctypes.c_int]
    return lib
