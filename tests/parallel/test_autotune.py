"""TFRING_AUTOTUNE=1 on a running job: every trial logged, the choice applied on every rank,
and the numbers unchanged while it tunes."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring._process import library

TUNE_ENV = {"TFRING_AUTOTUNE": "1", "TFRING_AUTOTUNE_SAMPLE_SECONDS": "0.01",
            "TFRING_AUTOTUNE_WARMUP_SAMPLES": "1", "TFRING_AUTOTUNE_SAMPLES_PER_TRIAL": "1"}


def _params():
    import ctypes
    fusion, cycle = ctypes.c_int64(), ctypes.c_double()
    assert library.capi().tfring_tuned_params(ctypes.byref(fusion), ctypes.byref(cycle)) == 1
    return fusion.value, cycle.value


def _restart(env):
    tfring.shutdown()
    for k in list(TUNE_ENV) + ["TFRING_AUTOTUNE_LOG"]:
        os.environ.pop(k, None)
    os.environ.update(env)
    tfring.init()


# 24 tensors of 256 KiB: the grid's fusion thresholds (1, 4, 16, 64 MiB) pack them 4, 16
# and 24 to a group, so the tuning really changes how the step travels.
TENSORS, ELEMENTS = 24, 64 * 1024


def _tensor(rank, i):
    # Small integers: float32 sums of them are exact, whatever the grouping.
    return (np.arange(ELEMENTS) % 97 + rank + i).astype(np.float32)


def _fusion_group_sizes(path):
    """How many tensors each MPI_ALLREDUCE in rank 0's timeline carried (a set)."""
    events = json.loads(path.read_text())
    return {e["args"]["tensors"] for e in events
            if e.get("name") == "MPI_ALLREDUCE" and e.get("ph") == "B" and "args" in e}


def test_autotune_tries_the_grid_then_holds_the_choice_everywhere(tmp_path, rank, size):
    log = tmp_path / "autotune.csv"
    timeline_path = tmp_path / "timeline.json"
    _restart(dict(TUNE_ENV, TFRING_AUTOTUNE_LOG=str(log)))
    tfring.start_timeline(str(timeline_path))
    try:
        # Separate ops, fused by the runtime as the threshold says (a grouped op travels as
        # one unit, whatever the threshold).
        @tf.function
        def step(*tensors):
            return [tfring.allreduce(t, op=tfring.Sum, name=f"tune.step.{i}")
                    for i, t in enumerate(tensors)]

        inputs = [tf.constant(_tensor(rank, i)) for i in range(TENSORS)]
        want = [sum(_tensor(r, i) for r in range(size)) for i in range(TENSORS)]
        done = False
        for i in range(20000):
            out = step(*inputs)
            for got, w in zip(out, want):  # exact while the settings change under it
                np.testing.assert_array_equal(got.numpy(), w)
            if i % 20 == 0:
                finished = rank == 0 and log.exists() and log.read_text().rstrip().endswith(",1")
                flag = tfring.allreduce(tf.constant([int(finished)]), op=tfring.Max,
                                        name="tune.done")
                if flag.numpy()[0]:
                    done = True
                    break
        assert done, "the autotuner did not finish"
        tfring.stop_timeline()
        if rank == 0:  # the grid changed the fusion groups while every result stayed exact
            sizes = _fusion_group_sizes(timeline_path)
            assert 4 in sizes and len(sizes) > 1, sizes
        for _ in range(5):  # the choice reaches every rank in the next negotiation round
            step(*inputs)
        mine = _params()
        everyone = tfring.allgather(tf.constant([[mine[0], int(mine[1] * 1000)]], tf.int64),
                                    name="tune.params").numpy()
        assert (everyone == everyone[0]).all(), everyone
        if rank == 0:
            rows = list(csv.DictReader(log.open()))
            trials, chosen = rows[:-1], rows[-1]
            assert len(trials) == 12 and chosen["chosen"] == "1"
            assert {(int(r["fusion_threshold_bytes"]), float(r["cycle_time_ms"]))
                    for r in trials} == {(m << 20, c) for m in (1, 4, 16, 64)
                                         for c in (0.25, 1.0, 4.0)}
            best = max(trials, key=lambda r: float(r["bytes_per_second"]))
            assert chosen["fusion_threshold_bytes"] == best["fusion_threshold_bytes"]
            assert mine == (int(chosen["fusion_threshold_bytes"]), float(chosen["cycle_time_ms"]))
    finally:
        _restart({})
    assert _params() == (64 << 20, 1.0)  # the defaults again without TFRING_AUTOTUNE


def test_unwritable_autotune_log_fails_init_on_every_rank(rank):
    tfring.shutdown()
    os.environ.update(TUNE_ENV, TFRING_AUTOTUNE_LOG="/nonexistent/dir/a.csv")
    try:
        # Only rank 0 writes the log, but no rank starts: each says why.
        expected = (ValueError, "cannot write TFRING_AUTOTUNE_LOG") if rank == 0 else \
            (RuntimeError, r"init\(\) failed on rank 0 \(its error there says why\)")
        with pytest.raises(expected[0], match=expected[1]):
            tfring.init()
        assert not tfring.is_initialized()
    finally:
        for k in list(TUNE_ENV) + ["TFRING_AUTOTUNE_LOG"]:
            os.environ.pop(k, None)
        tfring.init()
    np.testing.assert_array_equal(
        tfring.allreduce(tf.ones([2]), op=tfring.Sum, name="after.failed.init").numpy(),
        np.full(2, float(tfring.size())))
