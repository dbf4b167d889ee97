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

from tfring._ops.horovod_util import is_version_greater_equal_than  # noqa: F401
from tfring._init import init  # noqa: F401
from tfring.collectives import Average, Max, Min, Product, Sum  # noqa: F401
from tfring.compression import Compression  # noqa: F401
from tfring._process.gpu_pinning import pin_gpu  # noqa: F401
from tfring._ops.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)
from tfring._process.runtime import (  # noqa: F401
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, rank, rocm_built, shutdown, sycl_built, size, start_timeline, stop_timeline)
from tfring.keras import callbacks, elastic  # noqa: F401
from tfring.keras._values import allgather, allreduce, broadcast, reducescatter  # noqa: F401
from tfring.keras.optimizer import (  # noqa: F401
    DistributedKerasOptimizer, DistributedLossScaleOptimizer, DistributedOptimizer,
    PartialDistributedOptimizer, broadcast_global_variables, load_model)

__all__ = [
    "init", "shutdown", "is_initialized", "pin_gpu", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_built", "mpi_enabled", "nccl_built", "cuda_built",
    "gloo_built", "gloo_enabled", "ccl_built", "ddl_built", "rocm_built", "sycl_built",
    "mpi_threads_supported", "start_timeline", "stop_timeline",
    "Average", "Sum", "Min", "Max", "Product", "Compression",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "DistributedOptimizer", "PartialDistributedOptimizer", "DistributedKerasOptimizer",
    "DistributedLossScaleOptimizer",
    "load_model", "broadcast_global_variables",
    "allreduce", "allgather", "broadcast", "reducescatter", "callbacks", "elastic",
    "is_version_greater_equal_than",
]
