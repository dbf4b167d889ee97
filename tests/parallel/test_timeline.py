"""The timeline: rank 0 writes a Chrome-trace JSON of every tensor's phases."""

import collections
import json

import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring import timeline


def _rows(events):
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    rows = collections.defaultdict(list)
    for e in events:
        if e.get("ph") in ("B", "E"):
            rows[names[e["tid"]]].append(e)
    return rows


def test_timeline_records_every_phase_and_fusion_groups(tmp_path, rank, size):
    path = tmp_path / "timeline.json"
    tfring.start_timeline(str(path), mark_cycles=True)

    @tf.function
    def step(a, b, c):
        return tfring.grouped_allreduce([a, b, c], name="tl.grouped")

    for _ in range(2):
        out = step(tf.ones([4]), tf.ones([3]), tf.ones([2]))
    np.testing.assert_array_equal(out[0].numpy(), np.full(4, 1.0))  # averaged: still ones
    tfring.allgather(tf.ones([rank + 1, 2]), name="tl.gather")
    tfring.broadcast(tf.ones([5]), root_rank=size - 1, name="tl.bcast")
    tfring.stop_timeline()
    tfring.stop_timeline()  # harmless twice
    if rank != 0:
        assert not path.exists()  # only rank 0 writes
        return
    events = json.loads(path.read_text())  # valid JSON once stopped
    rows = _rows(events)
    # A grouped op travels as one unit: its kernel packs the tensors into the buffer that
    # holds its outputs, where the reduction runs: one row, no copy in or out.
    assert not any(name.startswith("tl.grouped.") for name in rows), sorted(rows)
    phases = [e["name"] for e in rows["tl.grouped"] if e["ph"] == "B"]
    assert phases == ["NEGOTIATE", "QUEUE", "MPI_ALLREDUCE"] * 2, phases
    group_args = [e["args"] for e in rows["tl.grouped"] if e.get("name") == "MPI_ALLREDUCE"]
    # 4 + 3 + 2 floats, each tensor starting at a multiple of 64 bytes, the whole rounded
    # up to one: 64 + 64 + 8 -> 192.
    assert group_args[0] == {"group": "tl.grouped", "tensors": 3, "bytes": 192}
    assert [e["name"] for e in rows["tl.gather"] if e["ph"] == "B"] == [
        "NEGOTIATE", "QUEUE", "MPI_ALLGATHER"]
    assert [e["name"] for e in rows["tl.bcast"] if e["ph"] == "B"] == [
        "NEGOTIATE", "QUEUE", "MPI_BROADCAST"]
    for name, row in rows.items():  # well-formed: B/E alternate, time never goes back
        assert [e["ph"] for e in row] == ["B", "E"] * (len(row) // 2), name
        ts = [e["ts"] for e in row]
        assert ts == sorted(ts), name
    assert any(e.get("name") == "CYCLE" and e["ph"] == "i" for e in events)
    # SUBMIT: from the kernel's start until the runtime's cycle took the tensor, just
    # before its NEGOTIATE phase began.
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    submits = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            assert e["name"] == "SUBMIT" and e["dur"] >= 0, e
            submits[names[e["tid"]]].append(e)
    for name in ("tl.grouped", "tl.gather", "tl.bcast"):
        negotiate = [e["ts"] for e in rows[name] if e.get("name") == "NEGOTIATE"]
        assert len(submits[name]) == len(negotiate), name
        for submit, begin in zip(submits[name], negotiate):
            assert submit["ts"] + submit["dur"] <= begin, (name, submit, begin)
    totals = timeline.phase_totals(events)
    assert totals["tl.grouped"]["MPI_ALLREDUCE"][1] == 2
    assert totals["tl.grouped"]["SUBMIT"][1] == 2


def test_timeline_errors_are_clear(tmp_path, rank):
    path = tmp_path / "t.json"
    tfring.start_timeline(str(path))
    try:
        if rank == 0:
            with pytest.raises(RuntimeError, match="already being written"):
                tfring.start_timeline(str(tmp_path / "other.json"))
    finally:
        tfring.stop_timeline()
    if rank == 0:
        with pytest.raises(ValueError, match="cannot write the timeline to '/nonexistent/t.json'"):
            tfring.start_timeline("/nonexistent/t.json")
