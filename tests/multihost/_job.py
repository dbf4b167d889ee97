"""Run by every rank of the multi-host job (test_multihost.py starts it with mpirun across two
network namespaces): `python _job.py OUT_DIR`. Each rank writes what it saw to
OUT_DIR/rank<R>.npz (its layout and host; every allreduce result and its weights after a
Keras fit, once flat and once hierarchical; on rank 0, the weights one process trains to);
rank 0 writes the timelines of both allreduce runs. The test checks all of it, so a rank only
fails here when a call raises."""

import os
import socket
import sys

import keras
import numpy as np

import tfring
from _inputs import GROUP, INEXACT, SINGLE, rank_input

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parallel"))
import _keras_problem  # noqa: E402  (the deterministic Keras problem of the parallel tests)

OPS = {"sum": tfring.Sum, "average": tfring.Average}
STEPS = 4


def allreduces(out_dir, mode, rank):
    """Every allreduce of _inputs, recorded in rank 0's timeline-<mode>.json; returns
    {'<mode>/<name>': result}."""
    tfring.start_timeline(os.path.join(out_dir, f"timeline-{mode}.json"))
    results = {}
    for name, dtype, shape, op in SINGLE + [INEXACT]:
        results[name] = tfring.allreduce(rank_input(name, rank, dtype, shape), op=OPS[op],
                                         name=name)
    grouped = tfring.grouped_allreduce([rank_input(n, rank, d, s) for n, d, s in GROUP],
                                       op=tfring.Sum, name="group")
    results.update({n: t for (n, _, _), t in zip(GROUP, grouped)})
    tfring.stop_timeline()
    return {f"{mode}/{name}": t.numpy() for name, t in results.items()}


def keras_fit(rank, size, mode):
    """model.fit with DistributedOptimizer and the broadcast callback on this rank's shard;
    returns {'<mode>/fit/<i>': weight}."""
    model, _ = _keras_problem.fit_distributed(keras, rank, size, keras.optimizers.SGD(0.1),
                                              steps=STEPS)
    return {f"{mode}/fit/{i}": w.numpy() for i, w in enumerate(model.weights)}


def main(out_dir):
    os.environ["TFRING_HIERARCHICAL_ALLREDUCE"] = "0"
    tfring.init()
    rank, size = tfring.rank(), tfring.size()
    saved = {"layout": np.array([rank, size, tfring.local_rank(), tfring.local_size(),
                                 tfring.cross_rank(), tfring.cross_size()]),
             "hostname": np.array(socket.gethostname()),
             "netns": np.array(os.readlink("/proc/self/ns/net"))}
    for mode in ("flat", "hierarchical"):
        if mode == "hierarchical":  # a setting init() reads: start again with it
            tfring.shutdown()
            os.environ["TFRING_HIERARCHICAL_ALLREDUCE"] = "1"
            tfring.init()
        saved.update(allreduces(out_dir, mode, rank))
        saved.update(keras_fit(rank, size, mode))
    # One process on the global batch, which the fits must match. Last: a model built on one
    # rank only would shift Keras's layer names, which name the gradients, on that rank.
    if rank == 0:
        reference = _keras_problem.reference_weights(keras, keras.optimizers.SGD(0.1), STEPS,
                                                     size)
        saved.update({f"reference/{i}": w for i, w in enumerate(reference)})
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **saved)
    print(f"rank {rank} on {socket.gethostname()}: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
