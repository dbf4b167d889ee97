"""The straggler report at 3 ranks (tests/failure/straggler_scenarios.py, one job in four
phases): nobody is named while the ranks are even; a rank slow before every allreduce is
named 'every_step', with the collective; a rank that stopped once for 2 s is named 'once';
every rank reads the same report; rank 0 logs its line and marks the timeline; the Keras
callback prints it at each epoch's end on rank 0 only."""

import json
import re

import pytest

from _scenario_run import run_scenario

ENV = {"TFRING_STRAGGLER_WINDOW_SECONDS": "0.5", "TFRING_STRAGGLER_REPORT_SECONDS": "1"}


def _reports(out, label):
    """Each rank's report at the end of phase `label` (a dict per rank)."""
    found = {int(r): json.loads(text) for r, text in
             re.findall(rf"^rank (\d): {label}: (\{{.*\}})$", out, re.MULTILINE)}
    assert sorted(found) == [0, 1, 2], out
    return found


# Timing: it compares how long ranks wait on each other, which a second job's load on the
# machine's two cores would blur.
@pytest.mark.serial
def test_the_report_names_the_slow_rank_how_and_where_and_nobody_when_even(tmp_path):
    timeline = tmp_path / "timeline.json"
    rc, out, _ = run_scenario("all", ranks=3, script="straggler_scenarios.py",
                              env=dict(ENV, STRAGGLER_TEST_TIMELINE=str(timeline)))
    assert rc == 0, out

    even = _reports(out, "even")
    assert even[0] == even[1] == even[2], out  # rank 0's, broadcast
    assert even[0]["stragglers"] == [], even[0]
    assert even[0]["cycles_compared"] >= 40, even[0]
    assert "no rank holds the others back" in even[0]["summary"], even[0]

    every = _reports(out, "every step")[0]
    named = every["stragglers"]
    assert [(s["rank"], s["kind"]) for s in named] == [(1, "every_step")], every
    held = every["ranks"]["1"]["held_seconds"]
    assert 1.0 <= held <= 3.0, every  # 30 steps, 50 ms each
    by_collective = every["ranks"]["1"]["by_collective"]
    assert max(by_collective, key=by_collective.get) == "slow", every
    assert every["ranks"]["1"]["late_cycles"] >= 25, every
    assert "rank 1 held the others up" in every["summary"], every
    assert re.search(r"slow every step: late in \d+ of the \d+ cycles of 'slow'",
                     every["summary"]), every

    once = _reports(out, "once")[0]
    kinds = {s["rank"]: s["kind"] for s in once["stragglers"]}
    assert kinds == {2: "once", 1: "every_step"}, once
    assert once["stragglers"][0]["rank"] == 2, once  # held the others longest
    longest = once["ranks"]["2"]["longest"]
    assert longest["collective"] == "once" and 1.5 <= longest["seconds"] <= 3.0, once

    # Rank 0 logs the line every TFRING_STRAGGLER_REPORT_SECONDS.
    assert re.search(r"straggler report over [0-9.]+ s \(\d+ cycles\): rank 1 held", out), out
    # Its timeline marks the cycles rank 1 came last into.
    # (One event a line, each followed by a comma: tfring/timeline.py's format.)
    events = [json.loads(line.rstrip().rstrip(","))
              for line in timeline.read_text().splitlines() if line.startswith("{")]
    last_in = [e for e in events if e.get("name") == "rank 1 last in"]
    assert len(last_in) >= 20, [e for e in events if e.get("ph") == "i"][:5]
    assert last_in[0]["args"]["collective"] == "slow", last_in[0]
    assert last_in[0]["args"]["others_waited_ms"] >= 20, last_in[0]

    # The Keras callback: rank 0 prints the line at each epoch's end, the others nothing.
    for epoch in (1, 2):
        assert re.search(rf"^rank 0: epoch {epoch}: straggler report over .*rank 1 held",
                         out, re.MULTILINE), out
    assert not re.search(r"^rank [12]: epoch", out, re.MULTILINE), out
    assert out.count("finished") == 3, out
