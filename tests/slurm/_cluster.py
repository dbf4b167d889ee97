"""A real Slurm cluster of two nodes on this machine, for the Slurm stage: Debian's munge,
slurmctld and slurmd, configured in a temporary folder of their own (nothing under /etc is
read or written), each slurmd in one of the multi-host test's network namespaces
(tests/multihost/_hosts.py) with a hostname of its own, so that the two nodes are two hosts
to Open MPI and to tfring.

    root namespace: munged, slurmctld (198.18.x.1), srun/sbatch/salloc, the tests
    <tag>h1: slurmd of node <tag>h1 (198.18.x.2) and the tasks it starts
    <tag>h2: slurmd of node <tag>h2 (198.18.x.3) and the tasks it starts

`cluster()` yields a Cluster once both nodes are idle and removes everything after (the
namespaces' removal kills whatever Slurm started in them). Where a piece is missing it raises
Unavailable naming the package or the step that failed.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import _hosts
import _run

# Debian 12's packages (`.ci/run` installs them): the tool, and the package it comes in.
TOOLS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "srun": "slurm-client",
         "sbatch": "slurm-client", "salloc": "slurm-client", "sinfo": "slurm-client"}
# Slurm's PMIx plugin dlopens this (libpmix-dev's link; libpmix2 has only the .so.2).
PMIX_LIBRARY = "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so"
PACKAGES = "munge slurmctld slurmd slurm-client libpmix-dev"
CPUS_PER_NODE = 2  # what each node claims (config_overrides): 2 tasks per node
READY_TIMEOUT = 60


class Unavailable(Exception):
    """The cluster cannot be made here; the message says which package or step failed."""


def missing_pieces():
    """What this machine lacks for the cluster, in words ('' when nothing)."""
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if not os.path.exists(PMIX_LIBRARY):
        missing.append("libpmix-dev")
    if not missing:
        return ""
    return (f"Debian packages missing: {' '.join(missing)} (`apt-get install "
            f"--no-install-recommends {PACKAGES}`; .ci/run does it)")


class Cluster:
    def __init__(self, folder, nodes, environ):
        self.folder = folder
        self.nodes = nodes  # [(name = hostname = netns, address)]
        self.env = environ  # os.environ plus SLURM_CONF: for srun, sbatch, salloc

    def run(self, argv, timeout, env=None):
        """Runs a Slurm client command (srun, sbatch --wait, salloc); (exit status, output).
        On timeout, its process group is killed and the output says so."""
        rc, out = _run.run(argv, self.env if env is None else env, timeout)
        return rc, out.split("\n", 1)[1]  # without the "$ command" line: callers add theirs

    def logs(self):
        return logs(self.folder)


def logs(folder):
    """The daemons' logs' last lines, for a failure's message."""
    text = []
    for name in sorted(os.listdir(os.path.join(folder, "log"))):
        with open(os.path.join(folder, "log", name), errors="replace") as f:
            text.append(f"--- {name}\n" + "".join(f.readlines()[-15:]))
    return "\n".join(text)


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _slurm_conf(folder, controller, nodes):
    """slurm.conf for a controller at (hostname, address) and nodes [(name, address)]."""
    f = folder
    lines = [
        "ClusterName=tfring",
        f"SlurmctldHost={controller[0]}({controller[1]})",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "SlurmUser=root", "SlurmdUser=root",
        # munge, at a socket of its own rather than the system's.
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={f}/run/munge.sock",
        f"StateSaveLocation={f}/state", f"SlurmdSpoolDir={f}/spool/%n",
        f"SlurmctldPidFile={f}/run/slurmctld.pid", f"SlurmdPidFile={f}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={f}/log/slurmctld.log", f"SlurmdLogFile={f}/log/slurmd-%n.log",
        # No cgroups in a container: process groups track the tasks.
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/builtin",
        "MpiDefault=none",  # Debian's default: plain srun does not wire up Open MPI 5
        "ReturnToService=2", "SlurmdTimeout=60", "MessageTimeout=20", "KillWait=5",
        "InactiveLimit=0", "MinJobAge=5",
        # Each node claims CPUS_PER_NODE whatever the machine has.
        "SlurmdParameters=config_overrides",
    ]
    lines += [f"NodeName={name} NodeHostname={name} NodeAddr={addr} CPUs={CPUS_PER_NODE} "
              f"State=UNKNOWN" for name, addr in nodes]
    lines.append(f"PartitionName=main Nodes={','.join(n for n, _ in nodes)} Default=YES "
                 f"MaxTime=INFINITE State=UP")
    path = os.path.join(folder, "slurm.conf")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


def _node_conf(folder, conf, name):
    """The node's own copy of slurm.conf, beside an mpi.conf of its own: the nodes share
    this machine's /tmp, where Slurm's PMIx plugin would make the same folder for a step on
    each node (spmix_appdir_<uid>_<step>) and the second node's step would fail."""
    node_dir = os.path.join(folder, "etc", name)
    os.makedirs(node_dir)
    shutil.copy(conf, node_dir)
    with open(os.path.join(node_dir, "mpi.conf"), "w") as f:
        f.write(f"PMIxCliTmpDirBase={folder}/spool/{name}\n")
    return os.path.join(node_dir, "slurm.conf")


def _start(argv, log, **kwargs):
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **kwargs)


def _start_munge(folder):
    """munged with a fresh key; its socket's folder must be open to all, the key's not."""
    os.makedirs(os.path.join(folder, "munge"), mode=0o700)
    os.makedirs(os.path.join(folder, "run"), mode=0o755)
    key = os.path.join(folder, "munge", "key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = os.path.join(folder, "run", "munge.sock")
    proc = _start(["munged", "-F", f"--key-file={key}", f"--socket={sock}",
                   f"--pid-file={folder}/munge/pid", f"--log-file={folder}/log/munged.log",
                   f"--seed-file={folder}/munge/seed"], os.path.join(folder, "log", "munged.out"))
    _wait_for(lambda: os.path.exists(sock), 20, "munged to create its socket", folder)
    return proc


def _wait_for(ready, timeout, what, folder):
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise Unavailable(f"timed out after {timeout} s waiting for {what}:\n{logs(folder)}")
        time.sleep(0.25)


def _idle(env, names):
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True,
                         text=True, timeout=30)
    states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
    return all(states.get(n) == "idle" for n in names)


@contextlib.contextmanager
def cluster():
    """Yields a Cluster of two idle nodes; tears it all down after, whatever happened."""
    missing = missing_pieces()
    if missing:
        raise Unavailable(missing)
    folder = tempfile.mkdtemp(prefix="tfring-slurm-")
    os.chmod(folder, 0o755)  # munged checks every folder above its socket
    os.makedirs(os.path.join(folder, "log"))
    os.makedirs(os.path.join(folder, "state"))
    daemons = []
    try:
        with _hosts.two_hosts() as hosts:
            nodes = [(netns, addr) for addr, netns in hosts]
            for name, _ in nodes:
                os.makedirs(os.path.join(folder, "spool", name))
            controller = (socket.gethostname().split(".")[0], _hosts.root_address())
            conf = _slurm_conf(folder, controller, nodes)
            env = dict(os.environ, SLURM_CONF=conf)
            daemons.append(_start_munge(folder))
            daemons.append(_start(["slurmctld", "-D", "-i", "-f", conf],
                                  os.path.join(folder, "log", "slurmctld.out"), env=env))
            for name, _ in nodes:
                node_conf = _node_conf(folder, conf, name)
                # In the node's network namespace, under its own hostname (as _agent.sh
                # does). nsenter, not `ip netns exec`: that mounts a /sys of its own, without
                # the cgroup file systems slurmd insists on finding.
                daemons.append(_start(
                    ["nsenter", f"--net=/run/netns/{name}", "unshare", "--uts", "sh", "-c",
                     'echo "$1" > /proc/sys/kernel/hostname && exec slurmd -D -f "$2" -N "$1"',
                     "sh", name, node_conf],
                    os.path.join(folder, "log", f"slurmd-{name}.out"), env=env))
            _wait_for(lambda: _idle(env, [n for n, _ in nodes]), READY_TIMEOUT,
                      "both slurmd to register as idle", folder)
            yield Cluster(folder, nodes, env)
    finally:
        for proc in reversed(daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in daemons:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
