"""shutdown() on one rank while another rank waits in a collective: the waiting rank's op
fails with an error naming it, and every rank can init() again and go on."""

import time

import numpy as np
import pytest
import tensorflow as tf

import tfring


def test_shutdown_on_rank_0_fails_the_pending_op_of_the_others(rank, size):
    # Everything before is done on every rank (eager ops complete before they return).
    tfring.barrier()
    if rank == 0:
        time.sleep(1.0)  # the others are waiting in their op by then
        tfring.shutdown()
    else:
        with pytest.raises(tf.errors.AbortedError,
                           match=r"shut down on rank 0 while this op was pending "
                                 r"\(flight recorder dumped to .*\) "
                                 rf"\(tensor 'only.on.others', rank {rank}\)"):
            tfring.allreduce(tf.ones([3]), name="only.on.others")
        assert tfring.is_initialized()  # stopped by rank 0, not shut down here
    tfring.init()  # every rank: starts anew, the stopped one included
    total = tfring.allreduce(tf.fill([2], float(rank)), op=tfring.Sum, name="after.restart")
    np.testing.assert_array_equal(total.numpy(), np.full(2, float(sum(range(size)))))
