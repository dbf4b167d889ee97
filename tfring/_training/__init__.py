"""Training with TensorFlow: a step's gradients reduced across ranks (gradients.py:
compression, sparse gradients, groups, local variables), gradients accumulated over
backward_passes_per_step (accumulation.py), the tape (gradient_tape.py), TF1's optimizer and
hook (optimizer_v1.py, with tf1_state.py, the state its wrappers make while the training op
is built, and adasum_delta.py, Adasum of what each rank's optimizer did), and sharded
optimizer state (sharded_state.py: the blocks' layout and their collectives, which
tfring.keras's sharded optimizers use).

May import: tfring._ops and what it may; tfring.gradient_aggregation, this layer's public
module. Not tfring.keras, but at first use where Horovod's API hands it a Keras object (TF1's
DistributedOptimizer given a Keras optimizer)."""
