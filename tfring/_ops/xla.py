"""tfring's collectives inside functions that XLA compiles (jit_compile=True).

The library lowers some ops to XLA custom calls that the runtime serves
(tfring/kernels/tf/xla): allreduce and grouped_allreduce, broadcast, reducescatter (each
rank's block of rows is known when XLA compiles), and size/rank/
local_size/local_rank (constants of the compiled function, read when XLA compiles it).
The others have output shapes that depend on what other ranks hold, which XLA must know
when it compiles; under XLA they fail when the function is traced, with a message that
names them. Where a GPU is visible, XLA places the ops on it; the GPU handler of the
lowering is built (GPU builds) but has not run on a GPU yet, so there tfring keeps its ops
out of XLA (they fail early, and tfring's Keras optimizer turns XLA off for its train step,
tfring/keras/_xla.py) unless TFRING_XLA_GPU=1 asks to try it.
"""

import functools
import os

import tensorflow as tf

# Generated op wrappers (tfring._process.library.ops()) that have an XLA lowering.
LOWERED_OPS = frozenset({"tfring_allreduce", "tfring_grouped_allreduce", "tfring_broadcast",
                         "tfring_reducescatter", "tfring_size", "tfring_rank", "tfring_local_size",
                         "tfring_local_rank"})


def in_xla_context():
    """True while TF traces a function that XLA must compile (jit_compile=True)."""
    from tfring._adapters import tf_internals

    if tf.executing_eagerly():
        return False
    return tf_internals.in_xla_context(tf.compat.v1.get_default_graph())


@functools.lru_cache(maxsize=None)
def why_unavailable():
    """Why tfring's ops cannot run under XLA in this process, or None when they can."""
    from tfring._process import library as _library

    info = _library.build_info()
    if not info.get("xla"):
        reason = info.get("xla_not_built_because") or "it was built before XLA support"
        return f"this build of tfring has no XLA lowerings ({reason})"
    gpu_allowed = os.environ.get("TFRING_XLA_GPU", "0").strip().lower() in ("1", "true", "yes",
                                                                            "on")
    if tf.config.list_physical_devices("GPU") and not gpu_allowed:
        return ("a GPU is visible, and the GPU handler of tfring's XLA lowering has not run "
                "on a GPU yet (TFRING_XLA_GPU=1 tries it; docs/xla.md)")
    return None


def available():
    """Whether tfring's lowered ops can run inside XLA-compiled functions here."""
    return why_unavailable() is None


def check_op(op, display):
    """Raises a clear error when the op wrapper `op` (named `display` in messages) is being
    traced into an XLA-compiled function and cannot run there."""
    if not in_xla_context():
        return
    what = op[len("tfring_"):] if op.startswith("tfring_") else op
    if op not in LOWERED_OPS:
        why = ("its output shape depends on the other ranks' tensors, which XLA must know "
               "when it compiles" if op not in ("tfring_barrier", "tfring_join") else
               "it has no XLA lowering yet")
        raise NotImplementedError(
            f"tfring.{what} ('{display}') cannot run inside an XLA-compiled function "
            f"(jit_compile=True): {why}. Under XLA, tfring runs allreduce, "
            "grouped_allreduce, broadcast and reducescatter; call this one outside the "
            "compiled function, "
            "or compile it with jit_compile=False.")
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(
            f"tfring.{what} ('{display}') was traced inside an XLA-compiled function "
            f"(jit_compile=True), and {reason}. Compile the function (or Keras model) with "
            "jit_compile=False.")
