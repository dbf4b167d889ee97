#!/bin/bash
# Runs Horovod's own TensorFlow test files against tfring, unchanged, through an alias package
# (tools/horovod_alias: `import horovod.tensorflow` gives tfring), under mpirun at each rank
# count, on Keras 3 and on tf_keras. Prints one summary line per run; logs in $LOGS.
#   tools/horovod_tests.sh HOROVOD_CHECKOUT [RANKS...]     (default ranks: 2 3)
# HOROVOD_CHECKOUT holds Horovod's test/parallel and test/utils (its git repository; the
# PyPI source package has no tests). Its test/utils/common.py needs `mock` and
# `parameterized` (pip install --target DIR mock parameterized cloudpickle; add DIR to
# EXTRA_PYTHONPATH). What the results were: docs/coming-from-horovod.md.
set -u
HOROVOD=$(cd "$1" && pwd); shift
RANKS=${*:-2 3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
MPIRUN=${MPIRUN:-$ROOT/.venv/bin/mpirun}
LOGS=${LOGS:-/tmp/tfring-horovod-tests}
FILES=${FILES:-test_tensorflow.py test_tensorflow_process_sets.py test_tensorflow2_keras.py
              test_tensorflow2_keras_process_sets.py test_tensorflow_keras.py}
mkdir -p "$LOGS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH=$ROOT:$ROOT/tools/horovod_alias${EXTRA_PYTHONPATH:+:$EXTRA_PYTHONPATH}
cd "$HOROVOD/test/parallel"
for n in $RANKS; do
  for legacy in 0 1; do
    for f in $FILES; do
      log=$LOGS/$f.np$n.legacy$legacy.log
      TF_USE_LEGACY_KERAS=$legacy timeout 1200 "$MPIRUN" --oversubscribe -np "$n" \
        --tag-output "$PYTHON" -m pytest -p no:cacheprovider -p keras2_names -q --color=no \
        -rfEs "$f" > "$log" 2>&1
      echo "$f np=$n tf_keras=$legacy: $(grep '^\[1,0\]' "$log" |
        grep -E ' (passed|failed|skipped|error)' | tail -1 | sed 's/.*<stdout>: //')"
    done
  done
done
