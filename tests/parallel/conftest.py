"""Runs under `mpirun -np N python -m pytest tests/parallel`: every rank runs every test.

Skips must be decided identically on every rank. A failing test aborts this rank at once
(os._exit), which makes mpirun end the whole job, so peers never block waiting for it.
"""

import os
import sys

import pytest
import tensorflow as tf

import tfring


def pytest_configure(config):
    tfring.init()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.failed:
        sys.stdout.write(f"\n[rank {tfring.rank()}] FAILED {report.nodeid}:\n{report.longreprtext}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


@pytest.fixture
def rank():
    return tfring.rank()


@pytest.fixture
def size():
    return tfring.size()


@pytest.fixture
def shared_tmp_path(tmp_path, request):
    """Rank 0's pytest tmp_path, for every rank (they share one machine's disk): one directory
    that rank 0 may write and every rank may read, removed with pytest's own."""
    return tfring.broadcast_object(str(tmp_path), 0, name=f"tmp.{request.node.nodeid}")


@pytest.fixture(autouse=True)
def _eager_by_default():
    tf.config.run_functions_eagerly(False)
    yield


def pytest_sessionfinish(session, exitstatus):
    # A rank may finish its tests before the others (running `-k` a selection of process-set
    # tests, the members of a set do more work): its shutdown at exit would fail the others'
    # pending collectives. Every rank waits for all first. (A failing rank never gets here:
    # it has left with os._exit, and mpirun ends the job.)
    if tfring.is_initialized():
        tfring.barrier()
