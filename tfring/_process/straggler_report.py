"""tfring.straggler_report(): which ranks hold the job back (the runtime's straggler watch,
tfring/kernels/core/straggler_watch.h; docs/hangs-and-stragglers.md)."""

import ctypes
import json

from tfring._process import library
from tfring._process.runtime import not_initialized


def straggler_report():
    """The straggler report as a dict, the same on every rank: how long the other ranks
    waited for each rank, since init(), and which ranks hold the job back.

    Rank 0 compares the ranks' waits about once a second (TFRING_STRAGGLER_WINDOW_SECONDS)
    while collectives run, so the report is at most that old. Its keys:

    - ``stragglers``: the ranks that hold the others back, most first, each a dict with
      ``rank``, ``kind`` (``"every_step"``: late in most cycles of the collective it holds
      the others up in most; ``"once"``: one event is most of its lateness;
      ``"at_times"``), ``held_seconds`` and ``share`` (of ``seconds``). Empty when no rank
      stands out.
    - ``ranks``: per rank (keys are ranks as strings), ``cycles`` compared, ``last_in``
      (cycles it came last into, by 1 ms or more), ``held_seconds`` (how long the others
      waited for it in all), ``longest`` (``seconds``, ``collective``, ``at_seconds``) and
      ``by_collective`` (the collectives the others waited for it in, most first).
    - ``windows``, ``seconds`` (the time covered), ``cycles_compared``,
      ``cycles_uncounted`` (past the cap of cycles a rank keeps per window), and
      ``summary``: the report in a sentence.

    Empty (``{}``) before the first comparison, or with TFRING_STRAGGLER_WINDOW_SECONDS=0.
    """
    lib = library.capi()
    size = 1 << 16
    while True:
        out = ctypes.create_string_buffer(size)
        needed = lib.tfring_straggler_report(out, size)
        if needed < 0:
            raise not_initialized("tfring.straggler_report()")
        if needed <= size:
            text = out.value.decode()
            return json.loads(text) if text else {}
        size = needed
