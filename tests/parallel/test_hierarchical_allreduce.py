"""TFRING_HIERARCHICAL_ALLREDUCE=1 for host tensors: the same results as the flat allreduce,
through the hierarchical path (the timeline names it). On one host the step across hosts
is a no-op; tests/multihost runs it across two hosts."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import rank_input


def _restart(env):
    tfring.shutdown()
    for k in ("TFRING_HIERARCHICAL_ALLREDUCE", "TFRING_TIMELINE", "TFRING_HOSTID"):
        os.environ.pop(k, None)
    os.environ.update(env)
    tfring.init()


def _reduce_all(tag):
    out = []
    for dtype in (tf.float32, tf.int64, tf.float16):
        x = tf.constant(rank_input(tfring.rank(), (5, 3), dtype))
        out.append(tfring.allreduce(x, op=tfring.Sum, name=f"hier.{tag}.sum").numpy())
        out.append(tfring.allreduce(x, op=tfring.Max, name=f"hier.{tag}.max").numpy())
    grouped = tfring.grouped_allreduce(
        [tf.constant(rank_input(tfring.rank(), (n,), tf.float64)) for n in (1, 7, 300)],
        op=tfring.Average, name=f"hier.{tag}.grouped")
    return out + [g.numpy() for g in grouped]


@pytest.fixture
def timeline_path(tmp_path, rank):
    # Rank 0 writes the timeline; every rank needs the same setting.
    path = tfring.broadcast_object(str(tmp_path / "hier.json") if rank == 0 else None, 0,
                                   name="hier.timeline_path")
    yield path
    _restart({})


def test_hierarchical_equals_flat(timeline_path, rank, size):
    flat = _reduce_all("flat")
    _restart({"TFRING_HIERARCHICAL_ALLREDUCE": "1", "TFRING_TIMELINE": timeline_path})
    hierarchical = _reduce_all("hier")
    tfring.stop_timeline()
    for f, h in zip(flat, hierarchical):
        np.testing.assert_array_equal(f, h)
    # And both against numpy for the sums.
    want = sum(rank_input(r, (5, 3), tf.float32) for r in range(size))
    np.testing.assert_array_equal(hierarchical[0], want)
    if rank == 0:
        with open(timeline_path) as f:
            phases = {e.get("name") for e in json.load(f) if e.get("ph") == "B"}
        assert "MPI_HIERARCHICAL_ALLREDUCE" in phases, phases
        assert "MPI_ALLREDUCE" not in phases


# How each rank names its host (TFRING_HOSTID) to make hosts of ranks on this machine, so
# that the step across hosts really runs: every rank a host of its own; blocks of 2 (at 3
# ranks, hosts of unequal size: {0, 1} and {2}); by parity (hosts of ranks not consecutive:
# {0, 2} and {1}).
HOST_NAMINGS = {"own": lambda rank: rank, "blocks of 2": lambda rank: rank // 2,
                "parity": lambda rank: rank % 2}


@pytest.mark.parametrize("naming", sorted(HOST_NAMINGS))
def test_hierarchical_across_hosts_named_by_tfring_hostid(naming, timeline_path, rank, size):
    flat = _reduce_all("flat.hosts")
    host_of = HOST_NAMINGS[naming]
    _restart({"TFRING_HIERARCHICAL_ALLREDUCE": "1", "TFRING_TIMELINE": timeline_path,
              "TFRING_HOSTID": f"host-{host_of(rank)}"})
    hosts = {}
    for r in range(size):
        hosts.setdefault(host_of(r), []).append(r)
    mine = hosts[host_of(rank)]
    assert (tfring.local_size(), tfring.local_rank()) == (len(mine), mine.index(rank))
    assert tfring.cross_size() == sum(1 for h in hosts.values() if len(h) > tfring.local_rank())
    hierarchical = _reduce_all("hier.hosts")
    tfring.stop_timeline()
    for f, h in zip(flat, hierarchical):
        np.testing.assert_array_equal(f, h)
    if rank == 0:
        with open(timeline_path) as f:
            phases = {e.get("name") for e in json.load(f) if e.get("ph") == "B"}
        assert "MPI_HIERARCHICAL_ALLREDUCE" in phases, phases
