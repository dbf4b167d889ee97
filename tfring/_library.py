"""Loads tfring's compiled library once: the TensorFlow ops and the C API beside them.

The library is built against one TensorFlow; loading it into another can crash in odd
places, so the recorded version is checked first and a mismatch is an ImportError that
names both versions and the command that rebuilds.
"""

import ctypes
import functools
import json
import os

_LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
LIBRARY_PATH = os.path.join(_LIB_DIR, "libtfring.so")
BUILD_INFO_PATH = os.path.join(_LIB_DIR, "build_info.json")
REBUILD_COMMAND = "python -m tfring.build"


@functools.lru_cache(maxsize=None)
def build_info():
    """What the library was built with: TensorFlow version, MPI, NCCL (a dict)."""
    if not os.path.exists(LIBRARY_PATH) or not os.path.exists(BUILD_INFO_PATH):
        raise ImportError(
            f"tfring's C++ library is not built ({LIBRARY_PATH} is missing). "
            f"Build it with: {REBUILD_COMMAND}")
    with open(BUILD_INFO_PATH) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def ops():
    """The module of generated op wrappers (tf.load_op_library)."""
    import tensorflow as tf

    from tfring import _autodeps

    check_tensorflow_version(build_info()["tensorflow"], tf.__version__)
    module = tf.load_op_library(LIBRARY_PATH)
    _autodeps.allow_unordered_collectives()
    return module


def check_tensorflow_version(built, installed):
    """Raises ImportError when the library was built for another TensorFlow."""
    if built != installed:
        raise ImportError(
            f"tfring's ops were built against TensorFlow {built} but TensorFlow {installed} "
            f"is installed. Rebuild them with: {REBUILD_COMMAND}")


@functools.lru_cache(maxsize=None)
def capi():
    """The C API (tfring/kernels/runtime/c_api.cc) of the same, already loaded, library."""
    ops()  # the TF check and load come first; dlopen then returns the same handle
    lib = ctypes.CDLL(LIBRARY_PATH, mode=ctypes.RTLD_GLOBAL)
    lib.tfring_init.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                ctypes.c_int64, ctypes.c_char_p, ctypes.c_int]
    lib.tfring_mpi_version.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.tfring_reduce_op_value.argtypes = [ctypes.c_char_p]
    lib.tfring_start_timeline.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                          ctypes.c_int]
    return lib
