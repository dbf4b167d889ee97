"""Reads the flight recorders every rank of a job dumped, and says what happened:

    python -m tfring.flight_recorder DIR          # a few lines
    python -m tfring.flight_recorder DIR --json   # the same, as one JSON object

Each rank writes DIR/rank-<rank>.json (tfring/kernels/runtime/flight_dump.h): its most recent
collectives with when each was submitted, agreed, started and finished, what was still
pending, and every Python thread's stack. From them: the first collective where the ranks
part (who submitted it, who did not, since when), collectives submitted with different
shapes, dtypes or ops, a rank that submitted another collective in its place, and for each
rank that held the job back, the line of Python its main thread was on.

The module is standard library only (it reads files).
"""

import argparse
import glob
import json
import os
import re
import sys

# Frames of installed packages, the standard library and tfring's own modules are the
# libraries', not the script's (for "where was the rank").
_LIBRARY = re.compile(r"[/\\](site-packages|dist-packages|lib[/\\]python3[.\d]*)[/\\]|"
                      r"[/\\]tfring[/\\](_\w+[/\\]|keras[/\\]|(collectives|functions|"
                      r"compression|elastic|gradient_aggregation|timeline|flight_recorder|"
                      r"__init__)\.py$)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
# What two ranks' submissions of one collective must agree on.
_SIGNATURE = ("op", "dtype", "shape", "reduce_op", "root_rank", "process_set")


def load(folder):
    """{rank: dump} of the rank-*.json files in `folder`."""
    dumps = {}
    for path in glob.glob(os.path.join(folder, "rank-*.json")):
        with open(path) as f:
            dump = json.load(f)
        dumps[int(dump["rank"])] = dump
    if not dumps:
        raise SystemExit(f"tfring.flight_recorder: no rank-*.json in {folder}")
    return dumps


def main_thread_frames(stacks):
    """The main thread's frames, innermost first, from faulthandler's text: the thread whose
    outermost frame is a module's top level."""
    threads, current = [], None
    for line in stacks.splitlines():
        if "(most recent call first)" in line:
            current = []
            threads.append(current)
        elif current is not None:
            m = _FRAME.match(line)
            if m:
                current.append({"file": m["file"], "line": int(m["line"]), "function": m["func"]})
    main = [t for t in threads if t and t[-1]["function"] == "<module>"]
    return main[0] if main else (threads[-1] if threads else [])


def script_location(frames):
    """The innermost frame of the script's own code (not tfring's, TensorFlow's or the
    standard library's), and the call it was in."""
    for i, frame in enumerate(frames):
        if not _LIBRARY.search(frame["file"]):
            inner = frames[i - 1]["function"] if i > 0 else None
            return dict(frame, calling=inner)
    return dict(frames[0], calling=None) if frames else None


def _unfinished(dump):
    """The rank's collectives not completed: pending, or failed when tfring stopped."""
    return [e for e in dump.get("entries", []) if e.get("status") != "ok"]


def _members(entry, size):
    return entry.get("process_set") or list(range(size))


def _describe(entry):
    shape = "[" + ", ".join(map(str, entry.get("shape", []))) + "]"
    site = f" at {entry['call_site']}" if entry.get("call_site") else ""
    return f"{entry['op']} '{entry['name']}' ({entry['dtype']} {shape}){site}"


def analyze(dumps):
    """What happened, as a dict (the --json output)."""
    size = max(d["size"] for d in dumps.values())
    dumped_at = max(d["dumped_at"] for d in dumps.values())
    unfinished = {r: _unfinished(d) for r, d in dumps.items()}
    by_name = {}
    for rank, entries in sorted(unfinished.items()):
        for e in entries:
            by_name.setdefault(e["name"], {}).setdefault(rank, e)
    report = {"size": size, "dumped": sorted(dumps),
              "not_dumped": [r for r in range(size) if r not in dumps],
              "reasons": {r: d.get("reason", "") for r, d in sorted(dumps.items())},
              "first_parting": None, "waiting_on_no_dump": None, "mismatches": [],
              "instead": [], "ranks": {}}
    partings = []
    for name, per_rank in by_name.items():
        first = next(iter(per_rank.values()))
        members = _members(first, size)
        missing = [r for r in members if r not in per_rank and r in dumps]
        submitted = min(e["submitted"] for e in per_rank.values() if e["submitted"])
        if missing:
            partings.append((submitted, name, sorted(per_rank), missing, first))
        for key in _SIGNATURE:
            values = {r: e.get(key) for r, e in per_rank.items()}
            if len({json.dumps(v) for v in values.values()}) > 1:
                report["mismatches"].append({"name": name, "field": key, "by_rank": values})
    if partings:
        # Where the ranks part: the collective most ranks wait in first (a rank blocked in
        # it never submits what it would have made next, so those are missing too, as a
        # consequence, and may even be older: a rank that skipped one submits the next
        # before the others reach theirs); ties go to the one submitted first.
        firsts = [min(entries, key=lambda e: e["seq"])["name"]
                  for entries in unfinished.values() if entries]
        submitted, name, by, missing, entry = min(
            partings, key=lambda p: (-firsts.count(p[1]), p[0]))
        report["first_parting"] = {
            "name": name, "description": _describe(entry), "submitted_by": by,
            "not_submitted_by": missing, "waiting_seconds": round(dumped_at - submitted, 3)}
        for rank in missing:
            others = [e for e in unfinished[rank] if e["name"] != name]
            if others:
                report["instead"].append({"rank": rank, "name": others[0]["name"],
                                          "description": _describe(others[0])})
    if report["not_dumped"] and not partings:
        # Every rank that dumped submitted the same ones: the oldest they wait in for a rank
        # without a dump (it died, is stopped, or its runtime could not write one).
        waiting = [(min(e["submitted"] or dumped_at for e in per_rank.values()), name, per_rank)
                   for name, per_rank in by_name.items()
                   if set(_members(next(iter(per_rank.values())), size)) &
                   set(report["not_dumped"])]
        if waiting:
            submitted, name, per_rank = min(waiting, key=lambda w: w[0])
            first = next(iter(per_rank.values()))
            report["waiting_on_no_dump"] = {
                "name": name, "description": _describe(first), "submitted_by": sorted(per_rank),
                "no_dump_from": [r for r in _members(first, size) if r in report["not_dumped"]],
                "waiting_seconds": round(dumped_at - submitted, 3)}
    for rank, dump in sorted(dumps.items()):
        frames = main_thread_frames(dump.get("python_stacks", ""))
        report["ranks"][rank] = {
            "host": dump.get("host"), "pid": dump.get("pid"), "cycles": dump.get("cycles"),
            "unfinished": [e["name"] for e in unfinished[rank]],
            "python": script_location(frames), "python_frames": frames}
    return report


def _ranks(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def render(report):
    """The report in a few lines."""
    lines = [f"{len(report['dumped'])} of {report['size']} ranks dumped"
             f"{'; no dump from ' + _ranks(report['not_dumped']) if report['not_dumped'] else ''}"
             f". Why (rank {report['dumped'][0]}): {report['reasons'][report['dumped'][0]]}"]
    parting = report["first_parting"]
    if parting:
        lines.append(f"The ranks part at {parting['description']}: submitted by "
                     f"{_ranks(parting['submitted_by'])} ({parting['waiting_seconds']} s before "
                     f"the dump), never by {_ranks(parting['not_submitted_by'])}.")
    elif report.get("waiting_on_no_dump"):
        w = report["waiting_on_no_dump"]
        lines.append(f"The ranks that dumped wait in {w['description']}: submitted by "
                     f"{_ranks(w['submitted_by'])} ({w['waiting_seconds']} s before the dump); "
                     f"{_ranks(w['no_dump_from'])} wrote no dump: it died, is stopped "
                     "(SIGSTOP, a debugger), or its process could not run the dump (look "
                     "there first: py-spy dump, gdb, the launcher's log).")
    else:
        lines.append("No collective is missing on any rank: every rank that dumped submitted "
                     "the same ones.")
    for m in report["mismatches"]:
        values = ", ".join(f"rank {r}: {v}" for r, v in sorted(m["by_rank"].items()))
        lines.append(f"Mismatch: '{m['name']}' has a different {m['field']} ({values}).")
    for i in report["instead"]:
        lines.append(f"Rank {i['rank']} submitted {i['description']} instead: the ranks "
                     "submitted collectives in different orders, or it skipped one.")
    stopped = parting["not_submitted_by"] if parting else []
    for rank, info in sorted(report["ranks"].items()):
        where = info["python"]
        if where is None:
            continue
        called = f", calling {where['calling']}" if where.get("calling") else ""
        waiting = ("in no collective" if not info["unfinished"] else
                   f"{len(info['unfinished'])} collective(s) not completed")
        mark = "stopped: " if rank in stopped else ""
        lines.append(f"Rank {rank} ({mark}{waiting}): its main thread was in "
                     f"{where['function']} at {where['file']}:{where['line']}{called}.")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfring.flight_recorder",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="where the ranks dumped (TFRING_FLIGHT_RECORDER_DIR)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = analyze(load(args.folder))
    print(json.dumps(report, indent=1) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
