"""A job its launcher started as several processes that MPI sees one by one is refused at
init(), saying what to run; a deliberate single process is not (tfring/_process/launch_check.py)."""

import os
import subprocess
import sys

import pytest

from tfring._process import launch_check as check

MPI = "Open MPI v5.0.11"


@pytest.mark.parametrize("environ, words", [
    # plain srun -n 2: each task an MPI job of one (Open MPI issue #13523)
    ({"SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2", "SLURM_PROCID": "1"},
     ["srun started 2 tasks (SLURM_STEP_NUM_TASKS=2)", "srun --mpi=pmix", "tfringrun -np 2",
      "TFRING_SINGLE_PROCESS=1"]),
    # python train.py in a batch script of 4 tasks
    ({"SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_JOB_ID": "7"},
     ["alone in a Slurm job of 4 tasks (SLURM_NTASKS=4)", "without srun or mpirun",
      "srun --mpi=pmix python", "tfringrun -np 4 python"]),
    # another MPI's launcher (MPICH's Hydra) around an Open MPI build
    ({"PMI_SIZE": "3", "PMI_RANK": "2"},
     ["PMI_SIZE=3: the launcher started 3 processes", "another MPI than the one tfring runs "
      "on (Open MPI v5.0.11)", "BUILD.md"]),
    ({"OMPI_COMM_WORLD_SIZE": "2", "SLURM_STEP_NUM_TASKS": "2"},
     ["OMPI_COMM_WORLD_SIZE=2"]),
])
def test_a_launchers_several_processes_seen_alone_are_refused(environ, words):
    problem = check.lone_process_problem(environ, MPI)
    for w in words:
        assert w in problem, problem


@pytest.mark.parametrize("environ", [
    {},                                                         # python train.py
    {"SLURM_NTASKS": "1", "SLURM_PROCID": "0"},                 # a one-task allocation
    {"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "4"},         # srun -n 1 in a larger one
    {"OMPI_COMM_WORLD_SIZE": "1", "SLURM_STEP_NUM_TASKS": "2"},  # mpirun -np 1 inside srun
    {"SLURM_STEP_NUM_TASKS": "2", "TFRING_SINGLE_PROCESS": "1"},  # on purpose
    {"SLURM_NTASKS": "many"},                                   # not a count
])
def test_one_process_meant_as_one_is_left_alone(environ):
    assert check.lone_process_problem(environ, MPI) == ""


def _child(env_extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PRTE_", "SLURM_", "PMI_"))}
    env.update(env_extra, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-c", "import tfring; tfring.init(); "
                           "print('size', tfring.size())"],
                          env=env, capture_output=True, text=True, timeout=120)


def test_init_under_plain_srun_fails_at_once_saying_what_to_run():
    # As plain `srun -n 2` starts each task: Slurm's variables, an MPI world of 1.
    proc = _child({"SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
                   "SLURM_STEPID": "0", "SLURM_JOB_ID": "1"})
    assert proc.returncode != 0, proc.stdout
    assert "tfring.init() refuses to start: srun started 2 tasks" in proc.stderr, proc.stderr
    assert "size" not in proc.stdout
    proc = _child({"SLURM_STEP_NUM_TASKS": "2", "TFRING_SINGLE_PROCESS": "1"})
    assert proc.returncode == 0 and "size 1" in proc.stdout, proc.stderr[-2000:]


def _hostfile(tmp_path, text):
    path = tmp_path / "hostfile"
    path.write_text(text)
    return {check.ORTE_HOSTFILE: str(path)}


def test_an_operators_hostfile_ignored_by_mpirun_is_named(tmp_path):
    # The MPI Operator's hostfile of two workers; Open MPI 5 ran all 8 ranks on the launcher.
    environ = _hostfile(tmp_path, "job-worker-0.job.ns.svc slots=4\n"
                                  "job-worker-1.job.ns.svc slots=4\n")
    problem = check.hostfile_problem(environ, size=8, cross_size=1, hostname="job-launcher")
    for words in (f"{tmp_path}/hostfile (OMPI_MCA_orte_default_hostfile) lists 2 hosts",
                  "job-worker-0.job.ns.svc, job-worker-1.job.ns.svc",
                  "every one of the 8 rank(s) runs on job-launcher", "Open MPI 5's mpirun "
                  "ignores", "tfringrun", f"mpirun --hostfile {tmp_path}/hostfile"):
        assert words in problem, problem


def test_a_hostfile_the_ranks_followed_is_no_problem(tmp_path):
    environ = _hostfile(tmp_path, "# two hosts\nnode-a:4\nnode-b slots=4 max_slots=8\n")
    assert check.hostfile_hosts(environ[check.ORTE_HOSTFILE]) == {"node-a": 4, "node-b": 4}
    # Across hosts: mpirun used it.
    assert check.hostfile_problem(environ, size=8, cross_size=2, hostname="node-a") == ""
    # All on the first host listed, which has room for them: mpirun's own placement.
    assert check.hostfile_problem(environ, size=4, cross_size=1, hostname="node-a.cluster") == ""
    # Hosts given by address (not cut at their first dot like names).
    environ = _hostfile(tmp_path, "10.0.0.2 slots=2\n10.0.0.3 slots=2\n")
    assert "lists 2 hosts" in check.hostfile_problem(environ, 4, 1, "launcher")
    # One host listed, or none given.
    assert check.hostfile_problem(_hostfile(tmp_path, "node-a slots=8\n"), 8, 1, "x") == ""
    assert check.hostfile_problem({}, 8, 1, "x") == ""


def test_ranks_that_leave_a_slurm_allocations_nodes_idle_are_named():
    # mpirun --oversubscribe -np 4 in `salloc -N 2 -n 4`: all 4 on the first node.
    environ = {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[1-2]",
               "PMIX_NAMESPACE": "prterun-node1-1234@1"}
    problem = check.allocation_problem(environ, size=4, cross_size=1, hostname="node1")
    for words in ("Slurm allocated 2 nodes (SLURM_JOB_NUM_NODES=2, node[1-2])",
                  "every one of the 4 ranks runs on node1", "--oversubscribe",
                  "tfringrun -np 4", "--map-by slot:OVERSUBSCRIBE", "srun --mpi=pmix"):
        assert words in problem, problem
    # Across the nodes, one rank, or one node: nothing to say.
    assert check.allocation_problem(environ, size=4, cross_size=2, hostname="node1") == ""
    assert check.allocation_problem(environ, size=1, cross_size=1, hostname="node1") == ""
    assert check.allocation_problem(dict(environ, SLURM_JOB_NUM_NODES="1"), 4, 1, "n") == ""
    assert check.allocation_problem({}, 4, 1, "node1") == ""
    # srun --mpi=pmix: the step's nodes are what the user asked for, not the job's.
    direct = {"SLURM_JOB_NUM_NODES": "2", "SLURM_STEP_NUM_NODES": "1",
              "PMIX_NAMESPACE": "slurm.pmix.7.0"}
    assert check.allocation_problem(direct, size=2, cross_size=1, hostname="node1") == ""
    assert "SLURM_STEP_NUM_NODES=2" in check.allocation_problem(
        dict(direct, SLURM_STEP_NUM_NODES="2"), size=4, cross_size=1, hostname="node1")
