"""An eager allreduce run through TensorFlow's own fast path: the C function that
TensorFlow's generated op wrappers call first (`TFE_Py_FastPathExecute`).

A small eager collective costs about what TensorFlow's own eager op costs plus tfring's
Python. The generated wrapper adds its own layers on top of the fast path (its argument
handling, its type-based dispatch), which after the op has evicted the caches cost more
than they do alone: for a small tensor, more than the rest of tfring's share of the call
(docs/benchmarks-allreduce.md, 'An eager allreduce through TensorFlow's fast path'). This
module calls the fast path the way the generated wrapper does, with every attribute and the
same error handling, and falls back to the wrapper itself wherever the fast path declines
(as the wrapper does) or this TensorFlow lacks it. The fast path records gradients itself,
as for any op it runs.
"""

from tfring._process import library
from tfring._adapters import tf_internals

# TensorFlow's internals that its generated op wrappers use, in every 2.x release (None:
# then the wrapper's path).
_FAST_PATH = tf_internals.fast_path()
if _FAST_PATH is not None:
    _execute, _eager_context, _NotOkStatus, _Fallback, _raise_from_not_ok_status = _FAST_PATH


def allreduce(tensor, reduce_op, prescale_factor, postscale_factor, tensor_name, call_site,
              cacheable, ranks, world=0):
    """TfringAllreduce of eager `tensor` with these attributes (`ranks`: the process set's
    attribute, empty for all ranks; `world`: its process_set_world, process_sets.py); what
    `library.ops().tfring_allreduce` returns."""
    prescale_factor, postscale_factor = float(prescale_factor), float(postscale_factor)
    if _FAST_PATH is not None:
        # Every attribute, as the generated wrapper passes them: a gradient function reads
        # the op's attributes from what was passed here (the tape records no defaults).
        try:
            return _execute(
                _eager_context(), "TfringAllreduce", None, tensor,
                "reduce_op", reduce_op, "tensor_name", tensor_name,
                "prescale_factor", prescale_factor, "postscale_factor", postscale_factor,
                "call_site", call_site, "process_set", ranks, "process_set_world", world,
                "cacheable", cacheable, "eager", True)
        except _NotOkStatus as e:  # raised as the generated wrapper raises it
            _raise_from_not_ok_status(e, None)
        except _Fallback:
            pass  # the wrapper's slower path handles what the fast one declines
    return library.ops().tfring_allreduce(
        tensor, reduce_op=reduce_op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, tensor_name=tensor_name, call_site=call_site,
        cacheable=cacheable, eager=True, process_set=list(ranks), process_set_world=world)
