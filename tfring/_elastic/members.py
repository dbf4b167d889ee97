"""Who the workers of an elastic job are, and how new ones join (tfring.elastic's growth).

tfringrun --host-discovery-script runs the user's script every second and writes what it
finds ("host:slots" lines) to a file, TFRING_ELASTIC_HOSTS_FILE. The workers read it at
`check_host_updates()` (every `commit()`): rank 0 reads, compares with the hosts the workers
are on and broadcasts its plan, so that every worker decides the same at the same commit.
To grow, the workers start the new ones themselves, with MPI_Comm_spawn (the same program
and arguments) on the hosts the plan names, and merge with them into one communicator; a
spawned worker's `tfring.init()` finds its parent and joins that merge instead of starting
a job of its own. Everything goes through MPI (mpi4py): no transport of tfring's own.

Each worker carries a label, the discovery host it runs on: tfringrun gives the first
workers theirs (TFRING_ELASTIC_START_HOSTS: the hosts and how many ranks it put on each, in
rank order), and a spawning rank 0 gives the new ones theirs. A host that lost a worker is
not given new ones (Horovod blacklists it too): its loss was likely the host's.
"""

import collections
import json
import os
import shutil
import sys
import threading
import time

from tfring._elastic.environment import (  # noqa: F401  (tests read them here)
    EXPORTED_LIST, HOSTS_FILE, MAX_NP, MIN_NP, START_HOSTS, START_TIMEOUT, TIMEOUT)

# How long a rank 0 short of --min-np waits between readings of the hosts file.
POLL_SECONDS = 0.5


def discovery_active(environ=os.environ):
    """Whether tfringrun runs a host discovery script for this job."""
    return bool(environ.get(HOSTS_FILE))


def read_hosts_file(path):
    """[(host, slots)] as tfringrun last wrote them; None while it cannot be read."""
    try:
        with open(path) as f:
            return [(str(h), int(s)) for h, s in json.load(f)["hosts"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parse_host_list(text):
    """'h1:2,h2:1' -> [('h1', 2), ('h2', 1)]."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, count = item.rpartition(":")
        pairs.append((host, int(count)))
    return pairs


def start_label(world_rank, environ=os.environ):
    """The discovery host tfringrun placed MPI_COMM_WORLD rank `world_rank` on: it fills the
    hosts in order (mpirun's mapping by slot)."""
    end = 0
    for host, count in parse_host_list(environ.get(START_HOSTS, "")):
        end += count
        if world_rank < end:
            return host
    return "localhost"


def plan_additions(labels, discovered, blacklist=(), max_np=None):
    """The hosts to start new workers on, one entry per worker: the discovered slots the
    workers (`labels`, one per rank) do not fill yet, on hosts not blacklisted, in the
    discovery's order, up to `max_np` workers in all."""
    on_host = collections.Counter(labels)
    room = float("inf") if max_np is None else max(0, max_np - len(labels))
    additions = []
    for host, slots in discovered:
        if host in blacklist:
            continue
        extra = min(max(0, slots - on_host[host]), room - len(additions))
        additions += [host] * int(extra)
    return additions


def plan_removals(labels, discovered):
    """The ranks to stop: on each host, the last ones beyond the slots it now offers (all of
    them on a host no longer listed)."""
    slots = dict(discovered)
    seen = collections.Counter()
    leaving = []
    for rank, host in enumerate(labels):
        seen[host] += 1
        if seen[host] > slots.get(host, 0):
            leaving.append(rank)
    return leaving


def plan_update(labels, discovered, blacklist=(), max_np=None, min_np=None):
    """{"add": hosts to start workers on, "leave": ranks to stop}. Stopping is skipped when
    it would leave fewer than min_np workers (or none): a discovery script that lists too
    little then ends nothing; a host really gone fails its workers anyway."""
    leaving = plan_removals(labels, discovered)
    kept = [host for rank, host in enumerate(labels) if rank not in leaving]
    additions = plan_additions(kept, discovered, blacklist, max_np)
    if len(kept) + len(additions) < max(min_np or 1, 1):
        leaving, kept = [], list(labels)
        additions = plan_additions(kept, discovered, blacklist, max_np)
    return {"add": additions, "leave": leaving}


class Members:
    """This process's view of the job's workers: its label, every rank's label (gathered
    again whenever the job's communicator changes), and the blacklisted hosts."""

    def __init__(self):
        self.my_label = None
        self.labels = None
        self.labels_comm = None
        self.blacklist = set()
        self.pending = None  # the plan agreed at the last check, for the coming reset

    def gather_labels(self, comm):
        from mpi4py import MPI

        if self.my_label is None:
            self.my_label = start_label(MPI.COMM_WORLD.Get_rank())
        if self.labels_comm is not comm:
            self.labels = comm.allgather(self.my_label)
            self.labels_comm = comm
        return self.labels

    def note_shrink(self, old_labels, comm):
        """After ranks were lost: blacklists the hosts they were on."""
        if old_labels is None:
            return
        now = collections.Counter(self.gather_labels(comm))
        self.blacklist.update(collections.Counter(old_labels) - now)

    def agree_on_update(self, comm, min_workers=None, timeout=None):
        """Rank 0's plan (plan_update), broadcast, so that every worker acts alike: kept as
        `pending` and returned. With `min_workers`, rank 0 waits up to `timeout` seconds for
        the discovery to offer that many workers in all; if it never does, the plan is to
        change nothing."""
        labels = self.gather_labels(comm)
        plan = {"add": [], "leave": []}
        if comm.Get_rank() == 0:
            path = os.environ[HOSTS_FILE]
            max_np, min_np = _int_env(MAX_NP), _int_env(MIN_NP)
            deadline = time.monotonic() + (timeout or 0)
            while True:
                discovered = read_hosts_file(path)
                if discovered is not None:
                    plan = plan_update(labels, discovered, self.blacklist, max_np, min_np)
                if min_workers is None:
                    break
                plan["leave"] = []  # short of workers: none stops
                if len(labels) + len(plan["add"]) >= min_workers:
                    break
                if time.monotonic() >= deadline:
                    plan["add"] = []
                    break
                time.sleep(POLL_SECONDS)
        self.pending = comm.bcast(plan, root=0)
        return self.pending

    def leave(self, comm):
        """Drops the pending plan's leaving ranks from the job: returns the communicator of
        the others, or None in a rank that leaves (which must then end its process)."""
        from mpi4py import MPI

        labels = self.gather_labels(comm)
        leaving = set(self.pending["leave"])
        me = comm.Get_rank()
        rest = comm.Split(MPI.UNDEFINED if me in leaving else 0, me)
        if me in leaving:
            return None
        rest.Set_errhandler(MPI.ERRORS_RETURN)
        self._adopt(rest, [host for rank, host in enumerate(labels) if rank not in leaving])
        return rest

    def grow(self, comm):
        """Starts the pending workers (MPI_Comm_spawn) and merges with them: returns the
        job's new communicator, where the old ranks keep their numbers."""
        from mpi4py import MPI

        labels = self.gather_labels(comm)
        hosts = self.pending["add"]
        info = MPI.Info.Create()
        info.Set("host", ",".join(f"{h}:{n}" for h, n in collections.Counter(hosts).items()))
        # Beyond the slots mpirun was given: the discovery script is the judge of room.
        info.Set("map-by", ":OVERSUBSCRIBE")
        info.Set("wdir", os.getcwd())
        new = sorted(set(hosts) - set(labels))
        if new:
            info.Set("PMIX_ADD_HOST", ",".join(new))  # hosts the job may have no daemon on yet
        # env(1) first: the settings are in place before Python starts (MPI's info values
        # are too short to carry them).
        argv = spawn_environment() + [sys.executable] + list(
            getattr(sys, "orig_argv", [sys.executable] + sys.argv))[1:]

        def spawn_and_merge():
            inter = comm.Spawn(shutil.which("env") or "/usr/bin/env", argv,
                               maxprocs=len(hosts), info=info, root=0)
            merged = inter.Merge(high=False)
            merged.Set_errhandler(MPI.ERRORS_RETURN)
            merged.bcast({"labels": labels + hosts, "blacklist": sorted(self.blacklist)},
                         root=0)
            return merged

        merged = _within(start_timeout_seconds(), spawn_and_merge, hosts)
        self._adopt(merged, labels + hosts)
        return merged

    def join_parent(self):
        """In a worker started by `grow`: the merge with the job that started it, and this
        worker's label. None when this process was not spawned."""
        from mpi4py import MPI

        parent = MPI.Comm.Get_parent()
        if parent == MPI.COMM_NULL:
            return None
        merged = parent.Merge(high=True)
        merged.Set_errhandler(MPI.ERRORS_RETURN)
        told = merged.bcast(None, root=0)
        self.my_label = told["labels"][merged.Get_rank()]
        self.blacklist = set(told["blacklist"])
        self._adopt(merged, told["labels"])
        return merged

    def _adopt(self, comm, labels):
        self.labels, self.labels_comm = list(labels), comm


def _within(seconds, call, hosts):
    """call() in a thread, waiting `seconds` for it. MPI's spawn waits for ever for a worker
    that dies before it joins (a crash while it imports TensorFlow, say, or a host it cannot
    reach), and a spawn in progress cannot be called off: so after the timeout this process
    says why and ends, as every worker of the job does at the same moment."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as e:  # handed to the caller below
            outcome["error"] = e

    thread = threading.Thread(target=run, name="tfring-elastic-spawn", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        print(f"tfring.elastic: the new worker(s) on {', '.join(sorted(set(hosts)))} did not "
              f"join within {seconds} s ({START_TIMEOUT}): one failed to start (its output "
              "is above) or its host cannot be reached; the job stops here", file=sys.stderr,
              flush=True)
        sys.stdout.flush()
        os._exit(1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def start_timeout_seconds():
    """How long joining workers may take to start (TFRING_ELASTIC_START_TIMEOUT)."""
    value = _int_env(START_TIMEOUT)
    return 120 if value is None else value


def spawn_environment(environ=os.environ):
    """What a spawned worker is given of this one's environment ("NAME=value" arguments of
    env(1)): what tfringrun exported to the first workers (it lists their names in
    EXPORTED_LIST), for mpirun's -x does not reach spawned ones. Not NCCL_HOSTID nor
    TFRING_HOSTID, which name the host of the process that has them."""
    names = {n for n in environ.get(EXPORTED_LIST, "").split(",") if n in environ}
    return [f"{k}={environ[k]}" for k in sorted(names)
            if k not in ("NCCL_HOSTID", "TFRING_HOSTID")]


def _int_env(key):
    value = os.environ.get(key, "").strip()
    return int(value) if value else None


def timeout_seconds():
    """tfringrun's --elastic-timeout (Horovod's default: 600 s)."""
    value = _int_env(TIMEOUT)
    return 600 if value is None else value


MEMBERS = Members()
