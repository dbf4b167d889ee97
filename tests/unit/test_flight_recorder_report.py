"""python -m tfring.flight_recorder's analysis (tfring/flight_recorder.py), on dumps made up
here: which collective the ranks part at, whatever the order in which the ranks submitted."""

from tfring import flight_recorder


def _entry(seq, name, submitted, status="pending", shape=(2,)):
    return {"seq": seq, "name": name, "op": "allreduce", "dtype": "float32",
            "shape": list(shape), "process_set": [], "reduce_op": "Average",
            "submitted": submitted, "taken": submitted, "agreed": None, "started": None,
            "finished": None, "status": status}


def _dump(rank, entries, stacks=""):
    return {"rank": rank, "size": 3, "host": "h", "pid": 1, "reason": "stall",
            "dumped_at": 100.0, "cycles": 1, "capacity": 8, "entries": entries,
            "python_stacks": stacks}


def test_the_ranks_part_where_most_wait_first_even_if_a_skipping_rank_went_on_earlier():
    # Rank 1 skipped step5 and submitted step6 before ranks 0 and 2 reached step5.
    done = [_entry(1, "step4", 10.0, "ok")]
    dumps = {0: _dump(0, done + [_entry(2, "step5", 50.0)]),
             1: _dump(1, done + [_entry(2, "step6", 40.0)]),
             2: _dump(2, done + [_entry(2, "step5", 51.0)])}
    report = flight_recorder.analyze(dumps)
    assert report["first_parting"]["name"] == "step5", report
    assert report["first_parting"]["submitted_by"] == [0, 2], report
    assert report["first_parting"]["not_submitted_by"] == [1], report
    assert report["first_parting"]["waiting_seconds"] == 50.0, report
    assert [i["name"] for i in report["instead"]] == ["step6"], report


def test_a_rank_without_a_dump_and_where_each_rank_was():
    stacks = ('Thread 0x01 (most recent call first):\n'
              '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
              '  File "/usr/lib/python3.11/threading.py", line 1000 in _bootstrap\n\n'
              'Current thread 0x02 (most recent call first):\n'
              '  File "/env/lib/python3.11/site-packages/tfring/_ops/reductions.py", line 9 in '
              'allreduce\n'
              '  File "/job/train.py", line 42 in step\n'
              '  File "/job/train.py", line 60 in <module>\n')
    dumps = {0: _dump(0, [_entry(1, "grad", 10.0)], stacks),
             1: _dump(1, [_entry(1, "grad", 11.0)], stacks)}
    report = flight_recorder.analyze(dumps)
    # Every rank that dumped waits in 'grad': the rank without a dump is the one to look at.
    assert report["not_dumped"] == [2] and report["first_parting"] is None, report
    where = report["ranks"][0]["python"]
    assert (where["file"], where["line"], where["function"], where["calling"]) == \
        ("/job/train.py", 42, "step", "allreduce"), where
    waiting = report["waiting_on_no_dump"]
    assert (waiting["name"], waiting["submitted_by"], waiting["no_dump_from"],
            waiting["waiting_seconds"]) == ("grad", [0, 1], [2], 90.0), report
    text = flight_recorder.render(report)
    assert "no dump from rank 2" in text, text
    assert ("The ranks that dumped wait in allreduce 'grad' (float32 [2]): submitted by ranks "
            "0, 1 (90.0 s before the dump); rank 2 wrote no dump: it died, is stopped") in text, \
        text
