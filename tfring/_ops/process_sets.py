"""Process sets: collectives among a subset of the ranks.

    even = tfring.ProcessSet([0, 2])
    if tfring.rank() in even.ranks:
        total = tfring.allreduce(x, op=tfring.Sum, process_set=even)

Every collective takes `process_set=` (default: `global_process_set`, all ranks). Only the
set's members submit its collectives; sets run concurrently with each other and with
collectives of all ranks. Unlike Horovod, a set needs no registration: the runtime makes
its communicators the first time one of its collectives runs (on the members only), so
`add_process_set` and `init(process_sets=...)` exist for Horovod scripts but are optional.
"""

import tensorflow as tf

from tfring._process import runtime


# How many times the job was re-formed (tfring.elastic): a set's ranks hold in its own.
_world = 0


class ProcessSet:
    """A fixed subset of the job's ranks (global rank numbers).

    Args:
        ranks: the member ranks, in any order, without repeats.
    """

    def __init__(self, ranks):
        ranks = [int(r) for r in ranks]
        if not ranks:
            raise ValueError("A ProcessSet needs at least one rank.")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"A ProcessSet lists each rank once. Received: {ranks}")
        if min(ranks) < 0:
            raise ValueError(f"Ranks of a ProcessSet are >= 0. Received: {ranks}")
        self._ranks = sorted(ranks)
        self.process_set_id = None  # Horovod's id, set by add_process_set
        self._removed = False  # by remove_process_set: using it is a mistake, as in Horovod
        self._world = _world  # ranks name processes of this world only (new_world)

    @property
    def ranks(self):
        """The members' global ranks, ascending."""
        return list(self._ranks) if self._ranks is not None else list(range(runtime.size()))

    def size(self):
        """The number of members."""
        return len(self.ranks)

    def rank(self):
        """This process's position among the members, or None when it is not one."""
        ranks = self.ranks
        me = runtime.rank()
        return ranks.index(me) if me in ranks else None

    def included(self):
        """Whether this process is a member."""
        return runtime.rank() in self.ranks

    def _op_kwargs(self, what):
        """The ops' `process_set` attribute as keyword arguments, after checking the set
        against the job: none for all ranks (the attribute's default, which spares an eager
        op the conversion of a list attribute). `what` names the op."""
        ranks = self._op_ranks(what)
        return {"process_set": ranks, "process_set_world": self._world} if ranks else {}

    def _op_ranks(self, what):
        """The ops' `process_set` attribute, checked as _op_kwargs says: () for all ranks."""
        if self._ranks is None:
            return ()
        self._check_registration(what)
        if runtime.is_initialized():
            size, me = runtime.size(), runtime.rank()
            if self._ranks[-1] >= size:
                raise ValueError(f"{what}: process set {self._ranks} names ranks the job does "
                                 f"not have (size {size}).")
            if me not in self._ranks:  # Horovod's error type; the runtime's words
                raise tf.errors.InvalidArgumentError(
                    None, None, f"rank {me} is not in the process set {self._ranks} of "
                    f"{what}: only its members may submit it")
            if len(self._ranks) == size:
                return ()
        return list(self._ranks)

    def _check_registration(self, what):
        """Horovod's ValueErrors for a set whose registration is wrong: one removed with
        remove_process_set, or one whose process_set_id no registered set has. (A set that
        was never registered is fine: tfring needs no registration.)"""
        if self._removed:
            raise ValueError(f"{what}: process set {self._ranks} was removed with "
                             "remove_process_set; add it again (add_process_set) to use it.")
        if self._world != _world:
            raise ValueError(runtime.stale_process_set_message(self._ranks, what))
        if self.process_set_id is not None and not is_registered(self):
            raise ValueError(f"{what}: process set {self._ranks} has process_set_id="
                             f"{self.process_set_id}, which no registered process set has "
                             "(an id is given by add_process_set).")

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks))

    def __repr__(self):
        return "ProcessSet(all ranks)" if self._ranks is None else f"ProcessSet({self._ranks})"


def _global():
    ps = ProcessSet.__new__(ProcessSet)
    ps._ranks = None
    ps.process_set_id = 0
    return ps


global_process_set = _global()


# Registered sets by Horovod's process_set_id (0 is the global set). Registration only gives
# a set its id, for Horovod's id-taking calls (size_op, process_set_included_op).
_registered = {}


def new_world():
    """Called by tfring.elastic after a reset: the ranks are renumbered, so every process set
    made before (but the global one) is refused from now on, and the registry starts empty."""
    global _world
    _world += 1
    _registered.clear()
    runtime.set_process_set_world(_world)  # ops traced with an older set are refused too


def add_process_set(process_set):
    """Horovod's registration call: returns the ProcessSet (made from a list of ranks if
    given one), with its `process_set_id` set. tfring needs no registration; the set's
    communicators are made on first use.

    Raises:
        ValueError, as Horovod: the ranks are already registered (in any order; all ranks
            are the global set's), or name ranks the job does not have.
    """
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if runtime.is_initialized():
        if ps.ranks[-1] >= runtime.size():
            raise ValueError(f"process set {ps.ranks} names ranks the job does not have "
                             f"(size {runtime.size()}).")
        if ps.ranks == list(range(runtime.size())):
            raise ValueError(f"Attempted to add a duplicate process set: {ps.ranks} is the "
                             "global process set (all ranks).")
    for set_id, known in _registered.items():
        if known == ps:
            raise ValueError(f"Attempted to add a duplicate process set: {ps.ranks} is "
                             f"registered already, with process_set_id={set_id}.")
    ps.process_set_id = max(_registered, default=0) + 1
    ps._removed = False
    _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Horovod's call: forgets the set's id (its communicators live until shutdown).
    Returns True, as Horovod does, or False for a set that was not registered."""
    set_id = getattr(process_set, "process_set_id", None)
    if not set_id or set_id not in _registered:
        return False
    del _registered[set_id]
    process_set.process_set_id = None
    process_set._removed = True
    return True


def is_registered(process_set):
    """Whether `process_set` (the object itself) holds a registered id."""
    set_id = getattr(process_set, "process_set_id", None)
    return set_id is not None and _registered.get(set_id) is process_set


def by_id(process_set_id):
    """The set registered under Horovod's `process_set_id` (0: the global set)."""
    if process_set_id == 0:
        return global_process_set
    if process_set_id not in _registered:
        raise ValueError(f"no process set has process_set_id={process_set_id} (register one "
                         f"with tfring.add_process_set)")
    return _registered[process_set_id]


def size_op(process_set_id=0, name=None):
    """A graph op whose value is `size()` when the graph runs (for process_set_id 0, the
    global set), or the size of the set registered under `process_set_id`."""
    if process_set_id == 0:
        return runtime.job_size_op(name=name)
    return tf.constant(by_id(process_set_id).size(), tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this process is a member of the set registered under `process_set_id` (0:
    the global set), else 0, as a graph op (Horovod's)."""
    return tf.constant(1 if by_id(process_set_id).included() else 0, tf.int32, name=name)


def from_attr(ranks):
    """The ProcessSet an op's `process_set` attribute names (for gradients)."""
    return ProcessSet(ranks) if ranks else global_process_set
