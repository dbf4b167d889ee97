"""The performance aims, checked against one `make bench` run (bench/allreduce.py).

Each aim is read from the same run's figures, beside what TensorFlow itself costs there
(its eager op, `tf.identity`; its floor for a step, the same `tf.function` with
`tf.identity` in place of each collective) and what raw MPI's transfer costs, so that a
miss says whose cost it is: tfring's, or TensorFlow's that any op pays (this VM's speed
drifts 2-3x from minute to minute, and TensorFlow's op with it).
"""

# An eager 4 B allreduce, named or not, stays under this (microseconds).
SMALL_EAGER_US = 50.0
# busbw against raw MPI's call beside it, from 1 MiB on.
BUSBW_RATIO = 0.95
# A step's fixed cost (the 4 KiB line's intercept), microseconds.
FIXED_STEP_US = 100.0
# Cost per tensor of a step against raw MPI's per call.
PER_TENSOR_RATIO = 2.0
# "Costs what a named call costs": within this factor.
UNNAMED_RATIO = 1.10


def _us(seconds):
    return f"{seconds * 1e6:.1f} us"


def _ms(seconds):
    return f"{seconds * 1e3:.3f} ms"


def _eager_rows(sweep):
    small = sweep.get("4")
    if small is None:
        return []
    named, unnamed, tf_op = small["named"], small["unnamed"], small["tf_op"]
    limit = SMALL_EAGER_US * 1e-6
    if max(named, unnamed) <= limit:
        met = "yes"
    elif tf_op > limit:
        met = "no: TensorFlow's own op alone is over the aim"
    else:
        met = "no"
    rows = [[f"eager 4 B: named and unnamed under {SMALL_EAGER_US:.0f} us",
             f"named {_us(named)}, unnamed {_us(unnamed)}", f"TF op {_us(tf_op)}",
             f"named +{_us(named - tf_op)}, unnamed +{_us(unnamed - tf_op)}", met]]
    ratio = unnamed / named
    rows.append(["eager 4 B: unnamed costs what named does", f"unnamed / named {ratio:.2f}",
                 "", "", "yes" if ratio <= UNNAMED_RATIO else "no"])
    return rows


def _busbw_rows(sweep):
    """Per size from 1 MiB: tfring's busbw against MPI's beside is MPI's time over
    tfring's. The aim leaves (1/0.95 - 1) of MPI's call for everything but the transfer;
    TensorFlow's eager op alone may already take more."""
    rows = []
    for key, row in sweep.items():
        nbytes = int(key)
        if nbytes < 1 << 20:
            continue
        mpi, named, tf_op = row["mpi"], row["named"], row["tf_op"]
        ratio = mpi / named
        budget = mpi * (1 / BUSBW_RATIO - 1)
        above = (named - tf_op) / mpi  # tfring's call less TF's op, against MPI's call
        if ratio >= BUSBW_RATIO:
            met = "yes"
        elif tf_op > budget:
            met = (f"no: TF's op ({_us(tf_op)}) is over the aim's room above MPI's call "
                   f"({_us(budget)})")
        else:
            met = "no"
        rows.append([f"busbw {nbytes >> 20} MiB >= {BUSBW_RATIO} x raw MPI beside",
                     f"{ratio:.2f} (call {_us(named)}, MPI {_us(mpi)})", f"TF op {_us(tf_op)}",
                     f"call less TF op: {above:.2f} x MPI's call", met])
    return rows


def _step_rows(steps):
    rows = []
    step = steps.get("100x16")
    if step is not None:
        named, floor, separate = step["named"], step["tf_floor"], step["mpi_separate"]
        met = ("yes" if named <= separate else
               "no: less TF's floor, yes" if named - floor <= separate else "no")
        rows.append(["100 x 16 KiB: separate ops <= raw MPI's 100 calls",
                     f"{_ms(named)} vs {_ms(separate)}", f"floor {_ms(floor)}",
                     f"less the floor: {_ms(named - floor)}", met])
        grouped, packed, packing = step["grouped"], step["mpi_packed"], step["mpi_packing"]
        ratio = grouped / (packed + floor)
        with_packing = grouped / (packing + floor)
        met = ("yes" if ratio <= 1.0 else
               "no: with raw MPI's packing, yes" if with_packing <= 1.0 else "no")
        rows.append(["100 x 16 KiB: grouped <= raw MPI's packed call + TF's floor",
                     f"{ratio:.2f} ({_ms(grouped)})", f"floor {_ms(floor)}",
                     f"with raw MPI's packing: {with_packing:.2f}", met])
    slower = [k for k, s in steps.items() if s["grouped"] > s["named"]]
    rows.append(["grouped never slower than separate ops",
                 "slower at " + ", ".join(slower) if slower else "faster at every step", "",
                 "", "no" if slower else "yes"])
    return rows


def _line_rows(lines):
    """`lines`: what -> (fixed seconds, seconds per tensor) from the 4 KiB steps."""
    if not lines:
        return []
    floor_fixed, _ = lines["TF floor"]
    mpi_fixed, mpi_per = lines["MPI separate calls, beside"]
    rows = []
    for what in ("tfring, named ops", "tfring, grouped"):
        fixed, per = lines[what]
        above = fixed - floor_fixed
        met = ("yes" if fixed <= FIXED_STEP_US * 1e-6 else
               "no: less TF's floor, yes" if above <= FIXED_STEP_US * 1e-6 else "no")
        rows.append([f"4 KiB steps, {what[8:]}: fixed cost < {FIXED_STEP_US:.0f} us",
                     _us(fixed), f"floor's fixed {_us(floor_fixed)}",
                     f"less the floor's: {_us(above)}", met])
        ratio = per / mpi_per
        rows.append([f"4 KiB steps, {what[8:]}: per tensor <= {PER_TENSOR_RATIO:.0f} x raw "
                     "MPI's per call", f"{_us(per)} vs {_us(mpi_per)} ({ratio:.2f})", "", "",
                     "yes" if ratio <= PER_TENSOR_RATIO else "no"])
    return rows


def aim_rows(ring, lines):
    """The aims' rows: aim, this run's figure, TensorFlow's own cost beside it, what tfring
    adds above that, met?"""
    return (_eager_rows(ring["tfring_sweep"]) + _busbw_rows(ring["tfring_sweep"]) +
            _step_rows(ring["tfring_steps"]) + _line_rows(lines))


HEADER = ["aim", "this run", "TensorFlow's own", "tfring above TF's own", "met?"]
