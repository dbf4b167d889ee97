"""Loads tfring's compiled library once, building it first when it is missing or stale.

The library (the TensorFlow ops and the C API beside them) lives in this environment's build
entry (`toolchain.entry_dir()`: one folder per TensorFlow, MPI, NCCL and Python, under
TFRING_CACHE_DIR, a checkout's build/ or ~/.cache/tfring). On the first import in a new
environment, or after tfring's sources or TensorFlow changed, the import builds it (about a
minute on 2 cores), under a file lock: the ranks of a job that import tfring at once build
it once and the others wait and load it. TFRING_BUILD_ON_IMPORT=0 turns that off: the import
then fails with the command that builds.

A failed build is an ImportError with the compiler's error and the section of BUILD.md that
says what to do. Processes that waited on the failed build fail with the same error instead
of each trying again.
"""

import ctypes
import functools
import json
import os
import sys
import time

from tfring.build import builder, toolchain

REBUILD_COMMAND = "python -m tfring.build"
FAILURE_NAME = "build_failed.json"


@functools.lru_cache(maxsize=None)
def entry():
    """This environment's build folder."""
    try:
        return toolchain.entry_dir()
    except toolchain.BuildError as e:
        raise ImportError(failure_text(str(e), e.section)) from None


def library_path():
    return os.path.join(entry(), toolchain.LIBRARY_NAME)


@functools.lru_cache(maxsize=None)
def build_info():
    """What the library was built with: TensorFlow version, MPI, NCCL, where (a dict)."""
    ensure_built()
    return toolchain.read_record(entry())


def _say(text):
    print(text, file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=None)
def ensure_built():
    """Builds the library unless it is there, from these sources, for this TensorFlow."""
    import tensorflow as tf

    folder = entry()
    reason = toolchain.stale_reason(folder, tf.__version__)
    if not reason:
        return
    if os.environ.get("TFRING_BUILD_ON_IMPORT", "1").strip().lower() in ("0", "false", "no"):
        raise ImportError(
            f"tfring's C++ library in {folder} cannot be loaded: {reason}. Build it with: "
            f"{REBUILD_COMMAND} (TFRING_BUILD_ON_IMPORT=0 turned off building at import)")
    waited_since = time.time()
    try:
        with builder.EntryLock(folder, say=_say):
            reason = toolchain.stale_reason(folder, tf.__version__)
            if not reason:
                return  # another process built it while this one waited
            _raise_if_failed_while_waiting(folder, waited_since)
            _say(f"tfring: building its C++ library for TensorFlow {tf.__version__} into "
                 f"{folder} ({reason}); this takes about a minute, once per environment")
            try:
                builder.build(folder, say=_say)
            except toolchain.BuildError as e:
                builder.write_json(os.path.join(folder, FAILURE_NAME),
                                 {"error": str(e), "section": e.section, "time": time.time()})
                raise
            builder.remove_if_exists(os.path.join(folder, FAILURE_NAME))
    except toolchain.BuildError as e:
        raise ImportError(failure_text(str(e), e.section)) from None
    except OSError as e:  # the build folder cannot be written: no BuildError says so
        raise ImportError(failure_text(f"{folder}: {e}", "Where the build goes")) from None


def _raise_if_failed_while_waiting(folder, waited_since):
    try:
        with open(os.path.join(folder, FAILURE_NAME)) as f:
            failure = json.load(f)
    except (OSError, ValueError):
        return
    if failure.get("time", 0) >= waited_since:
        raise toolchain.BuildError(
            "another process building the same library failed; its error:\n" +
            failure.get("error", "(no message)"), failure.get("section", "When the build fails"))


def failure_text(error, section):
    """The ImportError's text: what failed, and BUILD.md's advice (shipped in the package)."""
    advice = build_doc_section(section)
    text = f"tfring's C++ library could not be built: {error}"
    if advice:
        text += f"\n\nFrom tfring's BUILD.md, '{section}':\n{advice}"
    return text + f"\n\nAfter fixing it, `import tfring` builds again (or run {REBUILD_COMMAND})."


def build_doc_section(title):
    """The text of one '## title' section of BUILD.md ('' when not found)."""
    for path in (os.path.join(toolchain.PACKAGE_DIR, "BUILD.md"),
                 os.path.join(toolchain.ROOT, "BUILD.md")):
        if os.path.exists(path):
            break
    else:
        return ""
    lines, inside = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("## "):
            inside = line[3:].strip() == title
            continue
        if inside:
            lines.append(line.rstrip("\n"))
    return "\n".join(lines).strip()


@functools.lru_cache(maxsize=None)
def ops():
    """The module of generated op wrappers (tf.load_op_library)."""
    import tensorflow as tf

    from tfring import _autodeps

    ensure_built()
    check_tensorflow_version(build_info()["tensorflow"], tf.__version__)
    module = tf.load_op_library(library_path())
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
    lib = ctypes.CDLL(library_path(), mode=ctypes.RTLD_GLOBAL)
    lib.tfring_init.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                ctypes.c_int64, ctypes.c_char_p, ctypes.c_int]
    lib.tfring_mpi_version.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.tfring_reduce_op_value.argtypes = [ctypes.c_char_p]
    lib.tfring_status_code_value.argtypes = [ctypes.c_char_p]
    lib.tfring_start_timeline.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                          ctypes.c_int]
    lib.tfring_atexit_within.argtypes = [ctypes.c_double, ctypes.c_int, ctypes.c_int,
                                         ctypes.c_char_p]
    return lib
