"""bench/_aims.py: how `make bench` reads the performance aims off a run's figures, and
whose cost it says a miss is (tfring's, or TensorFlow's own)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("_aims", os.path.join(ROOT, "bench", "_aims.py"))
aims = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(aims)

US = 1e-6
MS = 1e-3


def _run(small_named=40 * US, small_tf_op=30 * US, mib_named=200 * US, mib_tf_op=30 * US):
    sweep = {
        "4": {"named": small_named, "unnamed": small_named * 1.05, "tf_op": small_tf_op,
              "mpi": 2 * US},
        str(1 << 20): {"named": mib_named, "unnamed": mib_named, "tf_op": mib_tf_op,
                       "mpi": 150 * US},
    }
    steps = {
        "100x16": {"named": 2.0 * MS, "grouped": 1.5 * MS, "tf_floor": 0.9 * MS,
                   "mpi_separate": 1.6 * MS, "mpi_packed": 0.5 * MS, "mpi_packing": 0.7 * MS},
        "10x4": {"named": 0.3 * MS, "grouped": 0.35 * MS, "tf_floor": 0.2 * MS,
                 "mpi_separate": 0.1 * MS, "mpi_packed": 0.04 * MS, "mpi_packing": 0.05 * MS},
    }
    lines = {"TF floor": (80 * US, 3 * US), "MPI separate calls, beside": (40 * US, 8 * US),
             "tfring, named ops": (150 * US, 10 * US), "tfring, grouped": (60 * US, 20 * US)}
    return {"tfring_sweep": sweep, "tfring_steps": steps}, lines


def _by_aim(ring, lines):
    rows = aims.aim_rows(ring, lines)
    assert all(len(r) == len(aims.HEADER) for r in rows)
    return {r[0]: r for r in rows}


def test_a_fast_small_call_meets_its_aim_and_says_what_tensorflow_took():
    rows = _by_aim(*_run())
    small = rows["eager 4 B: named and unnamed under 50 us"]
    assert small[-1] == "yes"
    assert small[2] == "TF op 30.0 us"
    assert small[3] == "named +10.0 us, unnamed +12.0 us"
    assert rows["eager 4 B: unnamed costs what named does"][-1] == "yes"


def test_a_miss_is_put_on_tensorflow_only_when_its_own_op_is_over_the_aim():
    rows = _by_aim(*_run(small_named=120 * US, small_tf_op=90 * US))
    assert rows["eager 4 B: named and unnamed under 50 us"][-1].startswith(
        "no: TensorFlow's own op")
    rows = _by_aim(*_run(small_named=60 * US, small_tf_op=30 * US))
    assert rows["eager 4 B: named and unnamed under 50 us"][-1] == "no"


def test_busbw_is_mpis_time_over_tfrings_and_the_room_above_mpi_is_checked():
    # MPI 150 us: 0.95 leaves 150 * (1/0.95 - 1) = 7.9 us for everything else.
    rows = _by_aim(*_run(mib_named=157 * US, mib_tf_op=5 * US))
    row = rows["busbw 1 MiB >= 0.95 x raw MPI beside"]
    assert row[1].startswith("0.96 ") and row[-1] == "yes"
    rows = _by_aim(*_run(mib_named=200 * US, mib_tf_op=30 * US))
    row = rows["busbw 1 MiB >= 0.95 x raw MPI beside"]
    assert row[1].startswith("0.75 ")
    assert row[3] == "call less TF op: 1.13 x MPI's call"
    assert row[-1].startswith("no: TF's op (30.0 us) is over the aim's room")
    rows = _by_aim(*_run(mib_named=200 * US, mib_tf_op=5 * US))
    assert rows["busbw 1 MiB >= 0.95 x raw MPI beside"][-1] == "no"


def test_steps_are_compared_with_and_without_tensorflows_floor():
    rows = _by_aim(*_run())
    # 2.0 ms against MPI's 1.6: over, but 1.1 without the floor.
    assert rows["100 x 16 KiB: separate ops <= raw MPI's 100 calls"][-1] == \
        "no: less TF's floor, yes"
    grouped = rows["100 x 16 KiB: grouped <= raw MPI's packed call + TF's floor"]
    assert grouped[1].startswith("1.07 ")  # 1.5 / (0.5 + 0.9)
    assert grouped[3] == "with raw MPI's packing: 0.94"
    assert grouped[-1] == "no: with raw MPI's packing, yes"
    slower = rows["grouped never slower than separate ops"]
    assert slower[1] == "slower at 10x4" and slower[-1] == "no"


def test_the_fitted_lines_give_fixed_and_per_tensor_costs():
    rows = _by_aim(*_run())
    named = rows["4 KiB steps, named ops: fixed cost < 100 us"]
    assert named[3] == "less the floor's: 70.0 us" and named[-1] == "no: less TF's floor, yes"
    assert rows["4 KiB steps, grouped: fixed cost < 100 us"][-1] == "yes"
    assert rows["4 KiB steps, named ops: per tensor <= 2 x raw MPI's per call"][-1] == "yes"
    per = rows["4 KiB steps, grouped: per tensor <= 2 x raw MPI's per call"]
    assert per[1] == "20.0 us vs 8.0 us (2.50)" and per[-1] == "no"
    assert _by_aim(*_run()[:1], {}) is not None  # no 4 KiB steps: no line rows, no error
