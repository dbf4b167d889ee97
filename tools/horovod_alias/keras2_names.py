"""pytest plugin (-p keras2_names) for tools/horovod_tests.sh: gives Horovod's Keras-2 test
files the names they import of Keras 2 (keras.optimizers.optimizer_v2; tf.keras.__version__
under TF_USE_LEGACY_KERAS=1), which tf_keras 2.21 keeps elsewhere and Keras 3 lacks."""
import os
import sys
import types

import tensorflow as tf
import tf_keras
from tf_keras.src.optimizers.legacy import optimizer_v2

sys.modules["keras.optimizers.optimizer_v2"] = types.ModuleType("keras.optimizers.optimizer_v2")
sys.modules["keras.optimizers.optimizer_v2"].optimizer_v2 = optimizer_v2
if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    tf.keras.__version__ = tf_keras.__version__
