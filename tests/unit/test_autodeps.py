"""tf.function's automatic control dependencies leave tfring's collectives unordered (they
pair by name, and chaining them would run a step's collectives one cycle each, unfused),
while Barrier keeps its place in the program. Checked on the traced graph: no collective
gets a control input from another one."""

import tensorflow as tf

import tfring

COLLECTIVES = {"TfringAllreduce", "TfringGroupedAllreduce", "TfringAllgather",
               "TfringGroupedAllgather", "TfringBroadcast", "TfringReducescatter",
               "TfringAlltoall"}


def control_predecessors(graph, op_types):
    """{op name: names of the ops of `op_types` among its control inputs}."""
    return {op.name: [c.name for c in op.control_inputs if c.type in op_types]
            for op in graph.get_operations() if op.type in op_types}


def test_collectives_in_a_function_are_not_chained_in_program_order():
    tfring.init()

    @tf.function
    def step(x):
        # Two of each, so that program order would have chained the second to the first.
        return [tfring.allreduce(x), tfring.allreduce(x + 1),
                tfring.grouped_allreduce([x, x + 2]), tfring.grouped_allreduce([x + 3]),
                tfring.allgather(x), tfring.allgather(x + 4),
                tfring.grouped_allgather([x, x + 5]), tfring.grouped_allgather([x + 6]),
                tfring.broadcast(x, 0), tfring.broadcast(x + 7, 0),
                tfring.reducescatter(x), tfring.reducescatter(x + 8),
                tfring.alltoall(x), tfring.alltoall(x + 9)]

    graph = step.get_concrete_function(tf.TensorSpec([4, 2], tf.float32)).graph
    found = control_predecessors(graph, COLLECTIVES)
    types = {op.type for op in graph.get_operations()}
    assert COLLECTIVES <= types, sorted(COLLECTIVES - types)  # every kind was traced
    assert all(not preds for preds in found.values()), found


def test_barriers_in_a_function_keep_their_program_order():
    tfring.init()

    @tf.function
    def step():
        tfring.barrier()
        tfring.barrier()

    graph = step.get_concrete_function().graph
    found = control_predecessors(graph, {"TfringBarrier"})
    assert len(found) == 2, found
    assert sorted(len(p) for p in found.values()) == [0, 1], found
