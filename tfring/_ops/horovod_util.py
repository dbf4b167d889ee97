"""Small helpers that Horovod exports from `horovod.tensorflow` and scripts call."""

import warnings

from tfring._ops.op_support import resolve_op


def split_list(items, n):
    """`items` cut into `n` consecutive parts whose lengths differ by at most one (the
    first parts longer), as Horovod's split_list."""
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def vars_to_refs(variables):
    """Hashable references to variables (for sets and dict keys)."""
    return [v.ref() for v in variables]


def refs_to_vars(refs):
    """The variables behind `vars_to_refs`'s references."""
    return [r.deref() for r in refs]


def handle_average_backwards_compatibility(op, average):
    """The reduce op for Horovod's deprecated `average=` argument."""
    if average is not None:
        warnings.warn("`average` is deprecated: pass op=tfring.Average or op=tfring.Sum.",
                      DeprecationWarning, stacklevel=3)
    return resolve_op(average, op)


def check_num_rank_power_of_2(num_rank):
    """Whether `num_rank` is a power of two (Horovod's Adasum precondition)."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def is_version_greater_equal_than(ver, target):
    """Whether version string `ver` (e.g. tf.__version__) is at least `target`, compared as
    PEP 440 versions, as Horovod's helper; both must be strings."""
    from packaging import version
    if not (isinstance(ver, str) and isinstance(target, str)):
        raise ValueError(f"is_version_greater_equal_than takes two strings; got "
                         f"{type(ver).__name__} {ver!r} and {type(target).__name__} {target!r}")
    return version.parse(ver) >= version.parse(target)


def gpu_available(ext_base_name="tensorflow", verbose=False):
    """Whether tfring can run collectives on a GPU here: its GPU path was built and
    TensorFlow sees a GPU (Horovod's helper; `ext_base_name` must be "tensorflow")."""
    if ext_base_name != "tensorflow":
        raise ValueError(f"tfring is for TensorFlow; gpu_available({ext_base_name!r}) does not "
                         "apply")
    import tensorflow as tf
    from tfring._process import runtime
    available = runtime.nccl_built() and bool(tf.config.list_physical_devices("GPU"))
    if verbose:
        print(f"tfring: GPU path built: {runtime.nccl_built()}, GPUs visible to TensorFlow: "
              f"{len(tf.config.list_physical_devices('GPU'))}")
    return available


def check_extension(ext_name="tfring", ext_env_var="", pkg_path="", *args):
    """Raises ImportError unless tfring's compiled library is built for the running
    TensorFlow (Horovod's check that a framework extension was built). tfring has one
    extension, for TensorFlow: naming another framework ("horovod.torch") is an error."""
    framework = str(ext_name).rsplit(".", 1)[-1]
    if framework not in ("tfring", "tensorflow", "keras"):
        raise ImportError(f"tfring is for TensorFlow and Keras only; it has no {ext_name!r} "
                          "extension.")
    from tfring._process import library as _library
    _library.ops()  # ImportError naming the missing library or the TensorFlow mismatch
