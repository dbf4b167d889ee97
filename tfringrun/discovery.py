"""tfringrun --host-discovery-script: runs the user's script every second, as horovodrun
does, and keeps what it reports in a file the workers read (tfring/_elastic/members.py).

The script prints one host per line, "host:slots" or "host" (then --slots, default 1, is
its slot count). A run that fails or times out leaves the last good answer in place, with a
warning on stderr: a flaky script must not shrink the job.
"""

import json
import os
import subprocess
import sys
import threading
import time

INTERVAL_SECONDS = 1.0  # horovodrun's
SCRIPT_TIMEOUT_SECONDS = 30


class DiscoveryError(RuntimeError):
    pass


def parse_hosts(text, default_slots=1):
    """The script's output as [(host, slots)], in its order; a host listed twice adds up."""
    slots = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host, sep, count = line.rpartition(":")
        if not sep:
            host, count = line, str(default_slots)
        if not host or not count.isdigit():
            raise DiscoveryError(f"line {number} {raw!r}: expected 'host:slots' or 'host'")
        slots[host] = slots.get(host, 0) + int(count)
    return list(slots.items())


def discover(script, default_slots=1):
    """Runs the script once (through the shell, so it may carry arguments)."""
    try:
        done = subprocess.run(script, shell=True, capture_output=True, text=True,
                              timeout=SCRIPT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired as e:
        raise DiscoveryError(f"{script!r} ran over {SCRIPT_TIMEOUT_SECONDS} s") from e
    if done.returncode != 0:
        raise DiscoveryError(f"{script!r} exited with status {done.returncode}: "
                             f"{done.stderr.strip()[-500:]}")
    return parse_hosts(done.stdout, default_slots)


def assign_start(hosts, np=None, max_np=None):
    """The first workers' placement, filling hosts in order: [(host, count)] with count > 0,
    np workers (all slots when None) capped by the slots and by max_np."""
    total = sum(slots for _, slots in hosts)
    wanted = min(total, np if np is not None else total,
                 max_np if max_np is not None else total)
    placed = []
    for host, slots in hosts:
        take = min(slots, wanted - sum(count for _, count in placed))
        if take > 0:
            placed.append((host, take))
    return placed


def write_hosts(path, hosts):
    """Replaces the file in one step, so that a reader never sees half of it."""
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        json.dump({"hosts": [[h, s] for h, s in hosts], "written_at": time.time()}, f)
    os.replace(partial, path)


class DiscoveryLoop:
    """Runs the script every INTERVAL_SECONDS in a daemon thread, writing each good answer."""

    def __init__(self, script, path, default_slots=1, err=sys.stderr):
        self.script, self.path, self.default_slots, self.err = script, path, default_slots, err
        self.hosts = None
        self._stop = threading.Event()
        self._last_error = None
        self._thread = None

    def poll_once(self):
        try:
            hosts = discover(self.script, self.default_slots)
        except DiscoveryError as e:
            if str(e) != self._last_error:  # say each new trouble once, not every second
                print(f"tfringrun: host discovery failed, keeping its last answer: {e}",
                      file=self.err, flush=True)
            self._last_error = str(e)
            return self.hosts
        self._last_error = None
        if hosts != self.hosts:
            write_hosts(self.path, hosts)
            self.hosts = hosts
        return hosts

    def wait_for_slots(self, needed, timeout):
        """Polls until the script offers `needed` slots; SystemExit after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            hosts = self.poll_once() or []
            offered = sum(slots for _, slots in hosts)
            if offered >= needed:
                return hosts
            if time.monotonic() >= deadline:
                raise SystemExit(f"tfringrun: the host discovery script offered {offered} "
                                 f"slot(s) within --elastic-timeout {timeout} s, and the job "
                                 f"needs {needed} to start")
            time.sleep(INTERVAL_SECONDS)

    def start(self):
        self._thread = threading.Thread(target=self._run, name="tfringrun-discovery",
                                        daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(INTERVAL_SECONDS):
            self.poll_once()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SCRIPT_TIMEOUT_SECONDS + 1)
