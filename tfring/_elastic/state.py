"""tfring.elastic's states (Horovod's State, ObjectState, TensorFlowKerasState,
TensorFlowState): what training keeps across a reset, committed in host memory, rolled back
after a lost worker and synchronized from rank 0 (tfring/elastic.py says when)."""

import numpy as np
import tensorflow as tf

from tfring._adapters import tf_keras as tf_keras_hooks
from tfring._elastic import job
from tfring._elastic.members import MEMBERS, discovery_active
from tfring._process import runtime
from tfring.common.exceptions import HostsUpdatedInterrupt
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
        plan = job.agree(lambda comm: MEMBERS.agree_on_update(comm))
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
