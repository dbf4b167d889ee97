"""Two "hosts" on this machine for the multi-host test: network namespaces with an address
each, joined by a switch that mpirun, in the root namespace, reaches too.

    root namespace    veth <tag>       198.18.x.1   (mpirun)
                        |
    <tag>sw           bridge "br" with the switch end of every veth
                        |                 |
    <tag>h1           eth0 198.18.x.2    <tag>h2  eth0 198.18.x.3

The bridge has a namespace of its own so that traffic between the hosts never crosses the
root namespace's firewall (with br_netfilter loaded, a Docker host's FORWARD chain drops
bridged packets); a new namespace has no rules. Every name starts with <tag> = "tfmh" + the pid
of the test process, and every root-namespace address lies in 198.18.0.0/15 (reserved for
benchmarks, so never a real network), in a /29 picked by the pid: runs side by side never
collide, and leftovers of a killed run are recognised by their dead pid and removed.
"""

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess

PREFIX = "tfmh"


class Unavailable(Exception):
    """The hosts cannot be made here; the message says which command failed and why."""


def _ip(*args):
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise Unavailable(f"`ip {' '.join(args)}` failed: "
                          f"{proc.stderr.strip() or f'exit status {proc.returncode}'}")
    return proc.stdout


def _subnet(pid):
    index = pid % 2 ** 14  # /29s in 198.18.0.0/15
    return ipaddress.ip_network(f"{ipaddress.ip_address('198.18.0.0') + 8 * index}/29")


def _remove(tag):
    """Removes every namespace and link of `tag`, first killing what still runs inside."""
    for ns in (f"{tag}h1", f"{tag}h2", f"{tag}sw"):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    # Deleting a namespace frees its veths asynchronously; the root end goes now.
    subprocess.run(["ip", "link", "delete", tag], capture_output=True)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _remove_stale():
    """Removes what runs whose process is gone left behind (killed before cleaning up), and
    whatever carries our own pid (then a dead run's, whose pid we got)."""
    names = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]
    names += re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show"), re.M)
    pids = {int(m.group(1)) for m in map(re.compile(PREFIX + r"(\d+)").match, names) if m}
    for pid in pids:
        if pid == os.getpid() or not _running(pid):
            _remove(f"{PREFIX}{pid}")


def _make(tag, net):
    switch, hosts = f"{tag}sw", [f"{tag}h1", f"{tag}h2"]
    _ip("netns", "add", switch)  # first: where namespaces cannot be made, this says why
    _ip("-n", switch, "link", "add", "name", "br", "type", "bridge")
    _ip("link", "add", "name", tag, "type", "veth", "peer", "name", "root", "netns", switch)
    _ip("addr", "add", f"{net[1]}/{net.prefixlen}", "dev", tag)
    _ip("link", "set", "dev", tag, "up")
    for i, ns in enumerate(hosts, start=1):
        _ip("netns", "add", ns)
        _ip("-n", switch, "link", "add", "name", f"h{i}", "type", "veth", "peer", "name", "eth0",
            "netns", ns)
        _ip("-n", ns, "addr", "add", f"{net[1 + i]}/{net.prefixlen}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "dev", "eth0", "up")
        _ip("-n", ns, "link", "set", "dev", "lo", "up")
    for port in ["root", "h1", "h2"]:
        _ip("-n", switch, "link", "set", "dev", port, "master", "br", "up")
    _ip("-n", switch, "link", "set", "dev", "br", "up")
    return [(str(net[1 + i]), ns) for i, ns in enumerate(hosts, start=1)]


def root_address():
    """This process's address in the root namespace, on the hosts' switch."""
    return str(_subnet(os.getpid())[1])


@contextlib.contextmanager
def two_hosts():
    """Yields [(address, namespace) of each host] and removes it all after, whatever
    happened. Raises Unavailable where the hosts cannot be made."""
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            raise Unavailable(f"`{tool}` is not installed")
    tag = f"{PREFIX}{os.getpid()}"
    try:
        _remove_stale()
        yield _make(tag, _subnet(os.getpid()))
    finally:
        _remove(tag)
