"""Keras train steps with tfring's optimizer under XLA.

Keras 3 compiles the train step with XLA when `jit_compile=True`, and `jit_compile="auto"`
(the default) turns it on whenever a GPU is visible. tfring's allreduce has an XLA lowering
(tfring/_ops/xla.py), so the user's choice holds: the step is compiled with the gradients'
reduction inside it.

Where the lowering cannot run (a build without it, or a visible GPU: the lowering runs on
the host only so far), tfring keeps the step without XLA instead: Keras asks one function
whether a model can be compiled with XLA (`model_supports_jit`, when `compile()` resolves
jit_compile), and tfring adds to it: not when the model's optimizer is a tfring
DistributedOptimizer. Keras then builds the step without XLA and tfring warns once, saying
why. tfring's callbacks also switch XLA off in `set_model` there (for models compiled before
the optimizer was wrapped, and for tf_keras), and a step traced under XLA anyway fails early
with an error that says what to change.
"""

import warnings

from tfring._ops import xla as _xla
from tfring._adapters import keras3

_WARNED = set()


def install_keras_jit_guard(is_distributed):
    """Makes Keras 3 resolve jit_compile to False for models with a tfring optimizer when
    tfring's ops cannot run under XLA here.

    Returns False (and changes nothing) when this Keras has no such function to extend.
    """
    def guard(original):
        def model_supports_jit(model):
            optimizer = getattr(model, "optimizer", None)
            if optimizer is not None and is_distributed(optimizer):
                if not _xla.available():
                    _warn_once(model, "tfring.keras.DistributedOptimizer")
                    return False
            return original(model)
        return model_supports_jit

    return keras3.wrap_model_supports_jit(guard)


def _warn_once(model, who):
    key = id(model)
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(f"{who}: jit_compile (XLA) is off for model '{model.name}': "
                      f"{_xla.why_unavailable()}, so its train step runs as a "
                      "tf.function without XLA.", stacklevel=2)


def disable_jit_compile(model, who):
    """Turns off `model.jit_compile` (Keras 3 and tf_keras) if it is on and tfring's ops
    cannot run under XLA here; warns once."""
    if model is None or _xla.available():
        return
    try:
        enabled = bool(getattr(model, "jit_compile", False))
    except Exception:  # an uncompiled model may fail to resolve "auto"
        return
    if not enabled:
        return
    model.jit_compile = False
    # Keras builds its train function once; make it build a new one without XLA.
    for attr in ("train_function", "test_function", "predict_function"):
        if getattr(model, attr, None) is not None:
            setattr(model, attr, None)
    _warn_once(model, who)


def check_not_in_xla(what):
    """Raises a clear error when `what` is being traced into an XLA-compiled function where
    tfring's ops cannot run."""
    if _xla.in_xla_context() and not _xla.available():
        raise RuntimeError(
            f"{what} was traced inside an XLA-compiled function (jit_compile=True), and "
            f"{_xla.why_unavailable()}. Compile the model with jit_compile=False, or pass "
            "tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0) to fit(), which "
            "turns XLA off for the step.")
