"""The flight recorder's Python side (the runtime's is tfring/kernels/runtime/flight_dump.h):
every Python thread's stack in each dump, and tfring.dump_flight_recorder().

On SIGUSR1 (`kill -USR1` of a rank, or a dump the runtime decides itself: a stall, a lost
peer), Python's faulthandler writes every thread's stack into a memory file and then calls
the runtime's handler, which writes the dump with those stacks in it. faulthandler does so
from the signal, so a rank whose main thread is blocked in Python (a sleep, data loading, a
deadlock of its own) still says where it is."""

import ctypes
import faulthandler
import os
import signal

from tfring._process import library

_stacks = None  # the memory file faulthandler writes into, kept open for the process


def serve_stacks():
    """After each init: the first time, gives the runtime a memory file for the stacks and
    registers faulthandler for SIGUSR1 on it, chained to the handler the runtime installed
    (which must be in place first: faulthandler calls the one it finds)."""
    global _stacks
    if _stacks is not None or not hasattr(os, "memfd_create") or \
            not hasattr(signal, "SIGUSR1"):
        return
    fd = os.memfd_create("tfring-flight-recorder-stacks")
    stacks = os.fdopen(fd, "w+")
    if not library.capi().tfring_set_flight_stacks_fd(fd):
        stacks.close()  # the recorder is off (TFRING_FLIGHT_RECORDER_ENTRIES=0): no handler
        library.capi().tfring_set_flight_stacks_fd(-1)
        return
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=True)
    _stacks = stacks


def dump_flight_recorder(reason="tfring.dump_flight_recorder() was called"):
    """Writes this rank's flight recorder (its most recent collectives, what is pending,
    every Python thread's stack) to <TFRING_FLIGHT_RECORDER_DIR>/rank-<rank>.json now, and
    returns the file's path; the job goes on. `python -m tfring.flight_recorder DIR` reads
    every rank's file (docs/hangs-and-stragglers.md)."""
    path = ctypes.create_string_buffer(4096)
    error = ctypes.create_string_buffer(2048)
    code = library.capi().tfring_dump_flight_recorder(reason.encode(), path, len(path), error,
                                                      len(error))
    if code != 0:
        raise RuntimeError(f"tfring.dump_flight_recorder(): {error.value.decode()}")
    return path.value.decode()
