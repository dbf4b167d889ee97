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

from tfring import runtime


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
        against the job: none for all ranks (the attribute's default; an eager op with no
        list attribute to convert is a few microseconds faster). `what` names the op."""
        ranks = self._op_ranks(what)
        return {"process_set": ranks} if ranks else {}

    def _op_ranks(self, what):
        """The ops' `process_set` attribute, checked as _op_kwargs says: () for all ranks."""
        if self._ranks is None:
            return ()
        if runtime.is_initialized():
            size, me = runtime.size(), runtime.rank()
            if self._ranks[-1] >= size:
                raise ValueError(f"{what}: process set {self._ranks} names ranks the job does "
                                 f"not have (size {size}).")
            if me not in self._ranks:  # Horovod's error type for this misuse
                raise tf.errors.InvalidArgumentError(
                    None, None, f"{what}: rank {me} is not in the process set {self._ranks}; "
                    "only its members may run its collectives.")
            if len(self._ranks) == size:
                return ()
        return list(self._ranks)

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


def add_process_set(process_set):
    """Horovod's registration call: returns the ProcessSet (made from a list of ranks if
    given one), with its `process_set_id` set (the same id again for a set registered
    before). tfring needs no registration; the set's communicators are made on first use."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if runtime.is_initialized() and ps.ranks[-1] >= runtime.size():
        raise ValueError(f"process set {ps.ranks} names ranks the job does not have "
                         f"(size {runtime.size()}).")
    for set_id, known in _registered.items():
        if known == ps:
            ps.process_set_id = set_id
            return ps
    ps.process_set_id = max(_registered, default=0) + 1
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
    return True


def by_id(process_set_id):
    """The set registered under Horovod's `process_set_id` (0: the global set)."""
    if process_set_id == 0:
        return global_process_set
    if process_set_id not in _registered:
        raise ValueError(f"no process set has process_set_id={process_set_id} (register one "
                         f"with tfring.add_process_set)")
    return _registered[process_set_id]


def from_attr(ranks):
    """The ProcessSet an op's `process_set` attribute names (for gradients)."""
    return ProcessSet(ranks) if ranks else global_process_set
