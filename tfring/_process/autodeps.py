"""Keeps tf.function from running tfring's collectives one at a time.

Inside tf.function, TensorFlow adds control edges between stateful ops in program order
("automatic control dependencies"). tfring's ops are stateful (they must never be pruned,
folded or merged), so every collective would wait for the previous one to finish: a step's
gradients would go one cycle each and never be fused. TensorFlow exempts its own collective
and infeed ops through a list of "must run, in any order" op types; tfring's ops belong
there for the same reason, and their order does not matter because the runtime pairs
tensors across ranks by name. Barrier and Join stay ordered: where they sit in the program
is what they mean. The list is private to TensorFlow, so a TensorFlow without it
keeps the ordering and gets a warning instead of an error.
"""

import logging

UNORDERED_OP_TYPES = frozenset(
    ("TfringAllreduce", "TfringGroupedAllreduce", "TfringAllgather", "TfringGroupedAllgather",
     "TfringBroadcast", "TfringReducescatter", "TfringAlltoall"))


def allow_unordered_collectives(extra_op_types=()):
    """Registers tfring's op types, and `extra_op_types` (the benchmarks' stand-ins for
    them), as order-insensitive stateful ops (idempotent)."""
    from tfring._adapters import tf_internals

    if not tf_internals.add_order_insensitive_ops(UNORDERED_OP_TYPES | frozenset(extra_op_types)):
        logging.getLogger("tfring").warning(
            "tfring: this TensorFlow has no MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS; "
            "collectives inside tf.function run one at a time and are not fused.")
