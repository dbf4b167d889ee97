"""Reads a tfring timeline (TFRING_TIMELINE / tfring.start_timeline) and says where the time
went:

    python -m tfring.timeline summary timeline.json [--top N]

prints, per tensor, the total time and count of each phase (SUBMIT, NEGOTIATE, QUEUE,
MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, ...), largest first, then the totals per phase
with the mean time of one (what one op spends in each phase: README, Benchmarks).

A timeline of a job that was killed lacks its closing bracket, or ends mid-line: `load`
repairs that (drops the torn last event, closes the array), so every timeline is readable.
"""

import argparse
import collections
import json
import sys


def load(path):
    """The timeline's events (a list of dicts), repairing a file cut off mid-write."""
    with open(path) as f:
        text = f.read()
    try:
        events = json.loads(text)
    except json.JSONDecodeError:
        # Written one event per line, each followed by ",": keep the whole lines.
        lines = text.splitlines()
        kept = []
        for line in lines[1:] if lines and lines[0].strip() == "[" else lines:
            line = line.strip().rstrip(",")
            if not line or line == "]":
                continue
            try:
                kept.append(json.loads(line))
            except json.JSONDecodeError:
                break  # the torn last event, and nothing after it
        events = kept
    return [e for e in events if e]


def phase_totals(events):
    """{tensor: {phase: [total_us, count]}} from the B/E pairs of each tensor's row and its
    complete ("X") events."""
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    open_phase = {}
    totals = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for e in events:
        ph, tid = e.get("ph"), e.get("tid")
        if ph == "X":
            cell = totals[names.get(tid, str(tid))][e["name"]]
            cell[0] += e["dur"]
            cell[1] += 1
        elif ph == "B":
            open_phase[tid] = (e["name"], e["ts"])
        elif ph == "E" and tid in open_phase:
            name, start = open_phase.pop(tid)
            cell = totals[names.get(tid, str(tid))][name]
            cell[0] += e["ts"] - start
            cell[1] += 1
    return totals


def summary(events, top=None, out=sys.stdout):
    totals = phase_totals(events)
    by_phase = collections.defaultdict(lambda: [0, 0])
    rows = []
    for tensor, phases in totals.items():
        total = sum(t for t, _ in phases.values())
        rows.append((total, tensor, phases))
        for phase, (t, n) in phases.items():
            by_phase[phase][0] += t
            by_phase[phase][1] += n
    rows.sort(key=lambda r: -r[0])
    print(f"{len(rows)} tensors; time per phase in ms (count)", file=out)
    for total, tensor, phases in rows[:top]:
        parts = ", ".join(f"{p} {t / 1000:.3f} ({n})"
                          for p, (t, n) in sorted(phases.items(), key=lambda kv: -kv[1][0]))
        print(f"{tensor}: {total / 1000:.3f} ms: {parts}", file=out)
    print("all tensors: phase, total ms, count, mean us", file=out)
    for phase, (t, n) in sorted(by_phase.items(), key=lambda kv: -kv[1][0]):
        print(f"  {phase:<28} {t / 1000:10.3f} ms  {n:8d}  {t / max(n, 1):10.1f} us",
              file=out)
    return totals


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tfring.timeline", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="per-phase totals per tensor")
    s.add_argument("path")
    s.add_argument("--top", type=int, default=None, help="only the N slowest tensors")
    args = p.parse_args(argv)
    summary(load(args.path), top=args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
