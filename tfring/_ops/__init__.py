"""The collective ops, as tfring.collectives and tfring.functions offer them: checks of
dtypes, roots and devices and running an op eagerly or in a graph (op_support.py); the
names that pair tensors across ranks (naming.py); process sets (process_sets.py); the eager
fast path (eager_call.py); collectives under XLA (xla.py); the reductions (reductions.py)
and the ops that move data (data_movement.py); Adasum's reduction (adasum.py); every op's
gradient (gradients.py); Horovod's small helpers (horovod_util.py).

May import: tfring._process and what it may; tfring.collectives, tfring.compression and
tfring.functions, the public modules of this layer."""
