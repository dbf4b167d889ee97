"""tfring: data-parallel training for TensorFlow and Keras over MPI, with Horovod's API.

    import tfring as hvd
    hvd.init()
    total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)

See README.md for the whole API, docs/settings.md for the TFRING_* settings.
"""

import os as _os
import sys as _sys

# MPI on freshly mapped pages is much slower than on reused ones (every large output
# tensor would be new memory; docs/benchmarks-allreduce.md): TF's pooling (BFC) CPU
# allocator reuses them. It must be chosen before TF creates its CPU allocator (at the first
# op), so import tfring early. Set TF_CPU_ALLOCATOR_USE_BFC=false yourself to keep TF's
# default allocator.
_os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

try:
    import tensorflow as _tf  # noqa: E402,F401
except ImportError as _e:
    raise ImportError(
        "tfring needs TensorFlow 2.16 or newer, which this Python cannot import. tfring uses "
        "the TensorFlow you install and installs none itself: pip install 'tfring[cpu]' "
        "(tensorflow-cpu) or 'tfring[gpu]' (tensorflow with CUDA), or install TensorFlow "
        f"yourself. ({_e})") from _e

from tfring._adapters import tf_internals as _tf_internals  # noqa: E402

# Autograph would convert tfring's own Python (naming, checks, the optimizer wrappers) each
# time a user's tf.function calls into it: 1.6 of the 1.7 s of a first trace with three
# collectives. tfring's code builds graphs as TensorFlow's and Keras's do, which autograph
# leaves alone too; the user's own code is converted as before.
_tf_internals.keep_autograph_out_of("tfring")

from tfring._process.library import build_info  # noqa: E402
from tfring._ops import gradients as _gradients  # noqa: E402,F401  (registers the gradients)
from tfring._ops.horovod_util import (  # noqa: E402
    check_extension, check_num_rank_power_of_2, gpu_available,
    handle_average_backwards_compatibility, refs_to_vars, split_list, vars_to_refs)
from tfring.collectives import (  # noqa: E402
    Adasum, Average, Max, Min, Product, Sum, allgather, allreduce, alltoall, barrier, broadcast,
    grouped_allgather, grouped_allreduce, grouped_reducescatter, join, reducescatter)
from tfring.compression import Compression  # noqa: E402
from tfring.functions import (  # noqa: E402
    allgather_object, broadcast_, broadcast_object, broadcast_object_fn, broadcast_variables)
from tfring.gradient_aggregation import LocalGradientAggregationHelper  # noqa: E402
from tfring._process.flight_dump import dump_flight_recorder  # noqa: E402
from tfring._process.gpu_pinning import pin_gpu  # noqa: E402
from tfring._process.straggler_report import straggler_report  # noqa: E402
from tfring._training.gradient_tape import (  # noqa: E402
    DistributedGradientTape, PartialDistributedGradientTape)
from tfring._training.optimizer_v1 import (  # noqa: E402
    BroadcastGlobalVariablesHook, DistributedOptimizer, broadcast_global_variables)
from tfring._init import init  # noqa: E402
from tfring import elastic  # noqa: E402,F401  (Horovod's hvd.elastic)
from tfring._ops.process_sets import (  # noqa: E402
    ProcessSet, add_process_set, global_process_set, process_set_included_op,
    remove_process_set, size_op)
from tfring._process.runtime import (  # noqa: E402
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled,
    is_homogeneous, is_initialized, local_rank, local_rank_op, local_size, local_size_op,
    mpi_built, mpi_enabled, mpi_threads_supported, mpi_version, nccl_built, rank, rank_op,
    rocm_built, shutdown, sycl_built, size, start_timeline, stop_timeline)

__version__ = "0.1.0"

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "init", "shutdown", "is_initialized", "pin_gpu", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "is_homogeneous", "mpi_threads_supported", "mpi_version",
    "build_info", "mpi_built", "mpi_enabled", "nccl_built", "cuda_built", "gloo_built",
    "gloo_enabled", "ccl_built", "ddl_built", "rocm_built", "sycl_built",
    "start_timeline", "stop_timeline", "dump_flight_recorder", "straggler_report",
    "size_op", "rank_op",
    "local_size_op", "local_rank_op",
    "process_set_included_op",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "reducescatter",
    "grouped_reducescatter", "alltoall", "broadcast", "broadcast_", "barrier", "join",
    "broadcast_variables", "allgather_object", "broadcast_object", "broadcast_object_fn",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "Compression", "DistributedOptimizer", "DistributedGradientTape",
    "PartialDistributedGradientTape", "SyncBatchNormalization",
    "BroadcastGlobalVariablesHook", "broadcast_global_variables",
    "split_list", "vars_to_refs", "refs_to_vars", "handle_average_backwards_compatibility",
    "check_num_rank_power_of_2", "gpu_available", "check_extension",
    "LocalGradientAggregationHelper",
]


def __getattr__(name):
    # Horovod puts a Keras layer here; it is made at first use, so that `import tfring` (the
    # collectives, TF1, the tape) loads nothing of tfring.keras, nor Keras itself.
    if name == "SyncBatchNormalization":
        from tfring.keras.sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    raise AttributeError(f"module 'tfring' has no attribute {name!r}")


def _running_the_builder():
    # `python -m tfring.build` imports this package before it runs the builder, and the
    # builder must work exactly when the check below would fail (no library, another TF).
    argv = getattr(_sys, "orig_argv", None)
    if argv is None:  # Python 3.9: while `-m` looks for its module, sys.argv[0] is "-m"
        return _sys.argv[:1] == ["-m"]
    return any(a == "-m" and b == "tfring.build" for a, b in zip(argv, argv[1:])) or \
        "-mtfring.build" in argv


def _check_build():
    # Fail at import, not at first use, when the library is missing or built for another TF.
    from tfring._process import library as _library
    _library.ops()


if not _running_the_builder():
    _check_build()
