"""tfring.pin_gpu(): one GPU per process, chosen by local rank, as Horovod's scripts do by hand.

NCCL runs one rank per GPU. TensorFlow, left alone, shows every process all the GPUs of its
host and puts everything on GPU:0, so every rank of a host would share that one and NCCL
refuses the second ("Duplicate GPU detected"). Horovod's examples pin in the script:

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

Those lines work unchanged with tfring; `tfring.pin_gpu()` is the same in one call, with
the cases the lines get wrong made clear: a launcher that already gave each rank one GPU
(CUDA_VISIBLE_DEVICES per rank, Slurm's --gpus-per-task), fewer GPUs than ranks, and a call
after TensorFlow has started using the GPUs. It imports only TensorFlow and the runtime.
"""

import tensorflow as tf

from tfring._process import runtime


def pin_gpu(memory_growth=True):
    """Makes this process see only its own GPU: the one at its local rank.

    Call it right after `tfring.init()`, before the script's first TensorFlow op (TensorFlow
    fixes the visible GPUs when it first uses them). Memory growth is turned on for that GPU
    unless `memory_growth=False`: NCCL and tfring's fusion buffers are allocated outside
    TensorFlow's allocator and need room beside it.

    Where this process sees exactly one GPU, that one is kept (a launcher gave each rank its
    own). Two ranks that still end up on one GPU fail their first GPU collective, on every
    rank, naming both ranks.

    Returns:
        The device name to use, "/GPU:0", or None where this process sees no GPU.

    Raises:
        ValueError: this host runs more ranks than it has GPUs (and more than one GPU is
            visible), so no GPU can be given to each.
        RuntimeError: tfring is not initialized, or TensorFlow already uses another GPU
            than this rank's.
    """
    local_rank, local_size = runtime.local_rank(), runtime.local_size()
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    if len(gpus) == 1:
        mine = gpus[0]
    elif local_rank < len(gpus) and local_size <= len(gpus):
        mine = gpus[local_rank]
    else:
        raise ValueError(
            f"tfring.pin_gpu(): {local_size} ranks run on this host but it has {len(gpus)} "
            "GPUs; NCCL needs one GPU per rank. Start at most as many ranks per host as it "
            "has GPUs (mpirun -npernode N, srun --ntasks-per-node=N).")
    if tf.config.get_visible_devices("GPU") == [mine]:
        return "/GPU:0"  # pinned already (a second call, or the script's own lines)
    try:
        if memory_growth:
            tf.config.experimental.set_memory_growth(mine, True)
        tf.config.set_visible_devices(mine, "GPU")
    except RuntimeError as e:
        raise RuntimeError(
            f"tfring.pin_gpu() on rank {runtime.rank()} came too late: TensorFlow has already "
            f"started using the GPUs, so it keeps showing this process "
            f"{[d.name for d in tf.config.get_visible_devices('GPU')]} instead of only "
            f"{mine.name} (local rank {local_rank}). Call tfring.pin_gpu() right after "
            f"tfring.init(), before any TensorFlow op or model. ({e})") from e
    return "/GPU:0"

