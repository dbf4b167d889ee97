"""tfring for Keras: Keras 3 first (TensorFlow backend), tf_keras too (TF_USE_LEGACY_KERAS=1).

The classic Horovod Keras script works with one changed import:

    import tfring.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)
"""

from tfring.collectives import Average, Max, Min, Product, Sum  # noqa: F401
from tfring.compression import Compression  # noqa: F401
from tfring.runtime import (  # noqa: F401
    cross_rank, cross_size, init, is_initialized, local_rank, local_size, mpi_built,
    mpi_threads_supported, nccl_built, rank, shutdown, size, start_timeline, stop_timeline)
from tfring.keras import callbacks  # noqa: F401
from tfring.keras._values import allgather, allreduce, broadcast  # noqa: F401
from tfring.keras.optimizer import (  # noqa: F401
    DistributedKerasOptimizer, DistributedLossScaleOptimizer, DistributedOptimizer,
    broadcast_global_variables, load_model)

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_built", "nccl_built", "mpi_threads_supported",
    "start_timeline", "stop_timeline", "Average", "Sum", "Min", "Max", "Product", "Compression",
    "DistributedOptimizer", "DistributedKerasOptimizer", "DistributedLossScaleOptimizer",
    "load_model", "broadcast_global_variables",
    "allreduce", "allgather", "broadcast", "callbacks",
]
