"""tfring: data-parallel training for TensorFlow and Keras over MPI, with Horovod's API.

    import tfring as hvd
    hvd.init()
    total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)

See README.md for the whole API and the TFRING_* settings.
"""

from tfring._library import build_info
from tfring.collectives import (Average, Max, Min, Product, Sum, allgather, allgather_object,
                                allreduce, broadcast, broadcast_object, broadcast_variables,
                                grouped_allreduce)
from tfring.runtime import (cross_rank, cross_size, init, is_initialized, local_rank,
                            local_rank_op, local_size, local_size_op, mpi_built,
                            mpi_threads_supported, mpi_version, nccl_built, rank, rank_op,
                            shutdown, size, size_op)

__version__ = "0.1.0"

__all__ = [
    "Average", "Sum", "Min", "Max", "Product",
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_built", "nccl_built", "mpi_threads_supported",
    "mpi_version", "build_info", "size_op", "rank_op", "local_size_op", "local_rank_op",
    "allreduce", "grouped_allreduce", "allgather", "broadcast", "broadcast_variables",
    "allgather_object", "broadcast_object",
]


def _check_build():
    # Fail at import, not at first use, when the library is missing or built for another TF.
    from tfring import _library
    _library.ops()


_check_build()
