"""Every private name of Keras 3, tf_keras and TensorFlow that tfring uses, one module per
framework: `keras3`, `tf_keras`, `tf_internals`.

A private name (an attribute, method or module of theirs that starts with an underscore or
lives under `keras.src`, `tf_keras.src`, `tensorflow.python`, `tf.__internal__`) is what a
release may change without notice: Keras 3.16 made `_use_weight_decay` refuse an optimizer
not built yet, which broke shard_optimizer_state. So tfring spells such a name here only,
behind a function or class named for what tfring needs, and each module lists its hooks in
`HOOKS` (what tfring uses it for, the public API it waits for, a probe that says whether the
installed release still has it). tests/unit/test_adapters.py runs every probe: a release that
removes a hook fails there, naming the release and the hook, before any training test does.

Where a public API does the job, the callers use it and no hook is listed. The adapters
import nothing of tfring's but each other's `_hooks`; tf_keras is imported only when asked.
"""
