"""Horovod's module names, resolving to tfring's: lets Horovod's own test files run unchanged
against tfring (tools/horovod_tests.sh). A check of tfring, never installed with it."""
import os
import sys
import threading
import types

import tensorflow as tf

import tfring
import tfring.common.exceptions
import tfring.elastic
import tfring.keras
import tfring.keras.callbacks
import tfring.keras.elastic
from tfring._ops import horovod_util


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def _executing_eagerly():
    return tf.executing_eagerly()


def _in_thread(target, args=(), name=None, daemon=True, silent=False):
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def _env_rank_and_size():
    for rank, size in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                       ("PMI_RANK", "PMI_SIZE")):
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return None


util = _module("horovod.tensorflow.util", _executing_eagerly=_executing_eagerly,
               vars_to_refs=horovod_util.vars_to_refs, refs_to_vars=horovod_util.refs_to_vars)
common = _module("horovod.common",
                 exceptions=_module(
                     "horovod.common.exceptions",
                     HorovodInternalError=tfring.common.exceptions.HorovodInternalError,
                     HostsUpdatedInterrupt=tfring.common.exceptions.HostsUpdatedInterrupt),
                 util=_module("horovod.common.util",
                              is_version_greater_equal_than=(
                                  horovod_util.is_version_greater_equal_than)))
runner = _module("horovod.runner",
                 util=_module("horovod.runner.util",
                              threads=_module("horovod.runner.util.threads",
                                              in_thread=_in_thread)),
                 common=_module("horovod.runner.common",
                                util=_module("horovod.runner.common.util",
                                             env=_module("horovod.runner.common.util.env",
                                                         get_env_rank_and_size=(
                                                             _env_rank_and_size)))))
sys.modules.update({
    "horovod.tensorflow": tfring,
    "horovod.tensorflow.elastic": tfring.elastic,
    "horovod.tensorflow.keras": tfring.keras,
    "horovod.tensorflow.keras.callbacks": tfring.keras.callbacks,
    "horovod.tensorflow.keras.elastic": tfring.keras.elastic,
    "horovod.keras": tfring.keras,
    "horovod.keras.callbacks": tfring.keras.callbacks,
    "horovod.keras.elastic": tfring.keras.elastic,
})
tensorflow = tfring
keras = tfring.keras
# horovod.tensorflow's namespace holds its util module and _executing_eagerly too: the tests
# call hvd._executing_eagerly().
tfring.util = util
tfring._executing_eagerly = _executing_eagerly
