"""A job that its launcher started as several processes, and that MPI sees as several jobs of
one: tfring.init() refuses it, on every process, before any training.

Each process of such a job would train alone as rank 0 of 1, write its own checkpoints, and
the job would end "successfully". It happens with plain `srun -n N` where Slurm's default MPI
plugin cannot wire up the MPI tfring runs on (Open MPI 5 needs `srun --mpi=pmix`), with the
`mpirun` of another MPI than tfring's, and with `python train.py` in a Slurm batch script of
several tasks. The launcher says how many processes it meant (its environment variables);
MPI says how many it sees; where they disagree, the error says what to run instead.
TFRING_SINGLE_PROCESS=1 runs one process on purpose wherever it is.

Also a hostfile that lists several hosts while every rank runs on one host (Open MPI 5's
mpirun ignores the ORTE-era variable through which the Kubernetes MPI operators pass their
hostfile): a warning naming the file and the fix. Imports nothing of tfring's.
"""

import ipaddress

SINGLE_ON_PURPOSE = "TFRING_SINGLE_PROCESS"
# What MPI launchers tell each process they started: how many they started in all.
MPI_LAUNCHER_SIZES = ("OMPI_COMM_WORLD_SIZE",   # Open MPI's mpirun
                      "PMI_SIZE",               # MPICH's and Intel MPI's Hydra
                      "MV2_COMM_WORLD_SIZE")    # MVAPICH's mpirun_rsh
# Where the Kubeflow MPI Operator and Trainer v2 pass their hostfile: Open MPI 4's (ORTE's)
# name, which Open MPI 5's mpirun (PRRTE) ignores.
ORTE_HOSTFILE = "OMPI_MCA_orte_default_hostfile"


def _count(environ, name):
    try:
        return int(environ.get(name, "").strip())
    except ValueError:
        return 0


def lone_process_problem(environ, mpi_version):
    """Why this process, which MPI sees alone (a world of 1), belongs to a larger job by its
    launcher's word; "" where nothing says so, or where one process is meant."""
    if environ.get(SINGLE_ON_PURPOSE) == "1":
        return ""
    on_purpose = f" (To run one process on purpose, set {SINGLE_ON_PURPOSE}=1.)"
    for name in MPI_LAUNCHER_SIZES:
        if name in environ:
            n = _count(environ, name)
            if n <= 1:
                return ""  # an MPI launcher started this process alone: meant so
            return (f"{name}={n}: the launcher started {n} processes, but MPI sees this one "
                    f"alone (rank 0 of 1), so each would train on its own. The launcher "
                    f"belongs to another MPI than the one tfring runs on ({mpi_version}): "
                    f"start the job with that MPI's mpirun (tfringrun uses it), or build "
                    f"tfring against the launcher's MPI (TFRING_MPICXX, BUILD.md 'What it "
                    f"does')." + on_purpose)
    step = _count(environ, "SLURM_STEP_NUM_TASKS")
    if step > 1:
        return (f"srun started {step} tasks (SLURM_STEP_NUM_TASKS={step}), but each is an MPI "
                f"job of its own, rank 0 of 1, so each would train alone: Slurm's default MPI "
                f"plugin does not wire up {mpi_version}. Run `srun --mpi=pmix ...`, or "
                f"`tfringrun -np {step} ...` (mpirun) inside the allocation." + on_purpose)
    tasks = _count(environ, "SLURM_NTASKS")
    if tasks > 1 and "SLURM_STEP_NUM_TASKS" not in environ:
        return (f"this process runs alone in a Slurm job of {tasks} tasks (SLURM_NTASKS="
                f"{tasks}): the batch script started it without srun or mpirun, so it would "
                f"train as rank 0 of 1. Start it with `srun --mpi=pmix python ...` or "
                f"`tfringrun -np {tasks} python ...`." + on_purpose)
    return ""


def hostfile_hosts(path):
    """{host: slots} of a hostfile ('host slots=N', 'host:N' or 'host' lines; # comments);
    None if it cannot be read."""
    hosts = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        host, _, slots = words[0].partition(":")
        for word in words[1:]:
            if word.startswith("slots="):
                slots = word[len("slots="):]
        try:
            hosts[host] = hosts.get(host, 0) + (int(slots) if slots else 1)
        except ValueError:
            hosts[host] = hosts.get(host, 0) + 1
    return hosts


def _short(host):
    """A host name without its domain; an address as it is."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        return host.split(".", 1)[0]


def hostfile_problem(environ, size, cross_size, hostname):
    """Why the job's ranks, all on this host, ignored the hostfile the launcher's environment
    names; "" where they did not (or there is none)."""
    path = environ.get(ORTE_HOSTFILE)
    if not path or cross_size != 1:
        return ""
    hosts = hostfile_hosts(path)
    if not hosts or len({_short(h) for h in hosts}) < 2:
        return ""
    here = sum(n for h, n in hosts.items() if _short(h) == _short(hostname))
    if here >= size:
        return ""  # the first host listed had room for every rank: mpirun's own choice
    listed = ", ".join(sorted(hosts)[:4]) + (", ..." if len(hosts) > 4 else "")
    return (f"{path} ({ORTE_HOSTFILE}) lists {len(hosts)} hosts ({listed}), but every one of "
            f"the {size} rank(s) runs on {hostname}: Open MPI 5's mpirun ignores that "
            f"Open MPI 4 (ORTE) variable, which the Kubernetes MPI operators set. Start the "
            f"job with tfringrun (it passes the hostfile on), or `mpirun --hostfile {path}`.")


def _number(environ, name):
    return _count(environ, name) if name in environ else 0


def allocation_problem(environ, size, cross_size, hostname):
    """Why the job's ranks, all on this host, left the other nodes of their Slurm allocation
    idle; "" where they did not (or this is no Slurm job). Under `srun --mpi=pmix` the step
    has what the user asked for (its own node count); under mpirun in an allocation, the
    job's nodes count: `mpirun --oversubscribe` maps by core and fills the first node with
    every rank whatever the allocation's slots (tfringrun maps by slot)."""
    if size < 2 or cross_size != 1:
        return ""
    direct = environ.get("PMIX_NAMESPACE", "").startswith("slurm.")
    name = "SLURM_STEP_NUM_NODES" if direct else "SLURM_JOB_NUM_NODES"
    nodes = _number(environ, name)
    if nodes < 2:
        return ""
    return (f"Slurm allocated {nodes} nodes ({name}={nodes}, {environ.get('SLURM_JOB_NODELIST', '')}"
            f"), but every one of the {size} ranks runs on {hostname}. Under mpirun, "
            f"`--oversubscribe` maps ranks by core and ignores the allocation's slots: start "
            f"the job with `tfringrun -np {size}` (it maps by slot), `mpirun --map-by "
            f"slot:OVERSUBSCRIBE`, or `srun --mpi=pmix`.")

