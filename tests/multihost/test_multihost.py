"""One job across two hosts made on this machine (_hosts.py: network namespaces joined by
veths), 2 ranks each, mpirun reaching the hosts through a launch agent that enters their
namespace instead of ssh (_agent.sh). The job (_job.py) records what every rank saw; these
tests check the layout, allreduce and a Keras fit across hosts, and hierarchical allreduce
against flat. Skipped, saying what failed, where the namespaces cannot be made."""

import json
import os
import sys
import types

import numpy as np
import pytest

import _hosts
import _run
from _inputs import GROUP, INEXACT, SINGLE, expected

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
RANKS_PER_HOST, HOSTS = 2, 2
SIZE = RANKS_PER_HOST * HOSTS
MODES = ("flat", "hierarchical")
TIMEOUT = 180  # the job takes about 15 s on 2 cores
# What every rank needs from this environment; a real multi-host job forwards it the same way.
FORWARDED = ["PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "TF_CPP_MIN_LOG_LEVEL"]
JOB_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1",
           # A collective some rank never submits fails the job instead of hanging it.
           "TFRING_STALL_CHECK_TIME_SECONDS": "20", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "60"}


def mpirun_command(hosts, out_dir, env):
    return [MPIRUN, "-np", str(SIZE),
            "-H", ",".join(f"{address}:{RANKS_PER_HOST}" for address, _ in hosts),
            # Ranks 0,1 on the first host, 2,3 on the second. (--oversubscribe would make PRRTE
            # map by core, which put all 4 on the first host here.) The hosts share this
            # machine's cores: binding would pin a rank of each to the same core.
            "--map-by", "slot", "--bind-to", "none",
            "--prtemca", "plm_ssh_agent", os.path.join(HERE, "_agent.sh"),
            *[arg for var in sorted(env) if var in FORWARDED or var.startswith("TFRING_")
              for arg in ("-x", var)],
            sys.executable, os.path.join(HERE, "_job.py"), str(out_dir)]


def run_job(hosts, out_dir):
    """(exit status, the command and its output). On timeout, mpirun's process group is
    killed; what still runs in the hosts' namespaces is killed when _hosts removes them."""
    env = dict(os.environ, **JOB_ENV, MULTIHOST_HOSTS=" ".join(f"{a}={ns}" for a, ns in hosts))
    env.pop("TFRING_HIERARCHICAL_ALLREDUCE", None)  # the job sets it for each of its runs
    return _run.run(mpirun_command(hosts, out_dir, env), env, TIMEOUT)


def timeline_phases(path):
    """{tensor: [phase, ...]} from a Chrome-trace timeline (one row per tensor)."""
    events = json.loads(path.read_text())
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    phases = {}
    for e in events:
        if e.get("ph") == "B":
            phases.setdefault(rows[e["tid"]], []).append(e["name"])
    return phases


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """One run of the job: what each rank saved, rank 0's timelines, the hosts' names."""
    out_dir = tmp_path_factory.mktemp("multihost")
    try:
        with _hosts.two_hosts() as hosts:
            rc, out = run_job(hosts, out_dir)
    except _hosts.Unavailable as e:
        pytest.skip(f"cannot make two hosts from network namespaces: {e}")
    assert rc == 0, f"the job failed (exit status {rc}):\n{out[:2000]}\n...\n{out[-6000:]}"
    return types.SimpleNamespace(
        ranks=[dict(np.load(out_dir / f"rank{r}.npz")) for r in range(SIZE)],
        timelines={mode: timeline_phases(out_dir / f"timeline-{mode}.json") for mode in MODES},
        hostnames=[ns for _, ns in hosts])  # _agent.sh names each host after its namespace


def test_layout_follows_the_hosts(job):
    for r, saved in enumerate(job.ranks):
        # -H a:2,b:2 mapped by slot: ranks 0,1 on a, 2,3 on b.
        want = [r, SIZE, r % RANKS_PER_HOST, RANKS_PER_HOST, r // RANKS_PER_HOST, HOSTS]
        assert saved["layout"].tolist() == want, \
            f"rank {r}: [rank, size, local_rank, local_size, cross_rank, cross_size]"
    assert [str(saved["hostname"]) for saved in job.ranks] == \
        [name for name in job.hostnames for _ in range(RANKS_PER_HOST)]
    netns = [str(saved["netns"]) for saved in job.ranks]
    assert netns[0] == netns[1] != netns[2] == netns[3], netns
    assert os.readlink("/proc/self/ns/net") not in netns, "a rank ran in mpirun's namespace"


def test_allreduce_across_hosts_matches_numpy(job):
    for name, dtype, shape, op in SINGLE + [(n, d, s, "sum") for n, d, s in GROUP]:
        want = expected(name, dtype, shape, op, SIZE)
        for r, saved in enumerate(job.ranks):
            got = saved[f"flat/{name}"]
            assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{name} on rank {r}"
            np.testing.assert_array_equal(got, want, err_msg=f"{name} on rank {r}")
    name, dtype, shape, op = INEXACT
    for r, saved in enumerate(job.ranks):
        np.testing.assert_allclose(saved[f"flat/{name}"], expected(name, dtype, shape, op, SIZE),
                                   rtol=1e-5, atol=1e-5, err_msg=f"{name} on rank {r}")


def test_keras_fit_across_hosts_flat_and_hierarchical(job):
    reference = [job.ranks[0][f"reference/{i}"]
                 for i in range(sum(key.startswith("reference/") for key in job.ranks[0]))]
    for mode in MODES:
        for i, want in enumerate(reference):
            for r, saved in enumerate(job.ranks):
                np.testing.assert_array_equal(saved[f"{mode}/fit/{i}"],
                                              job.ranks[0][f"{mode}/fit/{i}"],
                                              err_msg=f"{mode}: weight {i}, rank {r} != rank 0")
            # As one process on the global batch, up to float rounding.
            np.testing.assert_allclose(job.ranks[0][f"{mode}/fit/{i}"], want, rtol=1e-4,
                                       atol=1e-5, err_msg=f"{mode}: weight {i}")


def test_hierarchical_allreduce_equals_flat(job):
    for r, saved in enumerate(job.ranks):
        for name, *_ in SINGLE + GROUP:
            # Exact inputs (_inputs.rank_input): every order of additions gives the same bits.
            np.testing.assert_array_equal(saved[f"hierarchical/{name}"], saved[f"flat/{name}"],
                                          err_msg=f"{name} on rank {r}")
        name = INEXACT[0]
        np.testing.assert_allclose(saved[f"hierarchical/{name}"], saved[f"flat/{name}"],
                                   rtol=1e-5, atol=1e-5, err_msg=f"{name} on rank {r}")


def test_hierarchical_run_used_the_hierarchical_backend(job):
    for mode, backend, other in [("flat", "MPI_ALLREDUCE", "MPI_HIERARCHICAL_ALLREDUCE"),
                                 ("hierarchical", "MPI_HIERARCHICAL_ALLREDUCE", "MPI_ALLREDUCE")]:
        # The grouped op travels as one unit, whose timeline row bears the op's name.
        for name in [n for n, *_ in SINGLE + [INEXACT]] + ["group"]:
            phases = job.timelines[mode].get(name, [])
            assert backend in phases and other not in phases, \
                f"{mode} run: tensor {name} went through {phases}, not {backend}"
