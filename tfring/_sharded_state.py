"""Sharded optimizer state (ZeRO stage 1): the layout of the blocks and the collectives
around an optimizer's update, shared by the Keras wrappers.

The trainable variables are laid end to end in one flat buffer per group (variables of one
dtype that the optimizer treats alike: with weight decay or without). Each rank owns one
contiguous block of each buffer, split as reducescatter splits rows (as evenly as possible,
the first ranks taking one element more), so blocks balance bytes, not variables. A step:
  1. each rank flattens its gradients into the group's buffer, and a reducescatter gives it
     the gradient of its block, averaged over the ranks;
  2. the wrapped optimizer updates the block, held in a variable of the block's size (so
     its slots, Adam's moments say, are the block's size too: 1/N of the state per rank);
  3. an allgather of the blocks gives every rank the whole buffer, in rank order, which is
     split back into the model's variables.
A reducescatter and an allgather move the bytes an allreduce moves (a ring allreduce is the
two), one collective of each per group per step.
"""

import zlib

import numpy as np
import tensorflow as tf

from tfring import _data_movement, _gradients, _library, collectives
from tfring.compression import Compression


def block_bounds(total, size):
    """[(start, length)] of each rank's block of `total` elements: reducescatter's split."""
    lengths = [total // size + (1 if r < total % size else 0) for r in range(size)]
    starts = np.cumsum([0] + lengths[:-1]).tolist()
    return list(zip(starts, lengths))


# Each variable starts a multiple of this many bytes into the buffer (zeros pad the gaps),
# so that the gathered buffer's piece of each variable can be a view of it (TfringViews:
# Eigen's aligned loads need aligned starts) and TensorFlow assigns such a view to the
# variable without a copy: the gathered weights reach the model with no copy at all. With
# tf.split instead, every weight is copied (docs/benchmarks-sharded.md has what it cost).
ALIGN_BYTES = 64


class GroupLayout:
    """Where each variable of one group sits in the group's buffer, and this rank's block.

    Variable j takes sizes[j] elements from offsets[j]; padded[j] - sizes[j] zeros follow
    it (see ALIGN_BYTES). Padding takes no part in the training: its gradient is zero, it
    is never written into a variable, and a checkpoint leaves it out."""

    def __init__(self, variables, rank, size):
        self.variables = list(variables)
        self.dtype = tf.as_dtype(self.variables[0].dtype)
        self.shapes = [tuple(int(d) for d in v.shape) for v in self.variables]
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        align = max(1, ALIGN_BYTES // self.dtype.size)
        self.padded = [-(-n // align) * align for n in self.sizes]
        self.offsets = np.cumsum([0] + self.padded[:-1]).tolist()
        self.total = int(sum(self.padded))
        self.start, self.length = block_bounds(self.total, size)[rank]

    def pieces(self):
        """[(variable index, first element in it, count, padding)] of the variables in this
        block, in order: `count` of the variable's elements, then `padding` zeros."""
        out, end = [], self.start + self.length
        for j, (offset, n, padded) in enumerate(zip(self.offsets, self.sizes, self.padded)):
            first, last = max(offset, self.start), min(offset + padded, end)
            if first < last:
                count = max(0, min(last, offset + n) - first)
                out.append((j, min(first - offset, n), count, last - first - count))
        return out

    def segment_ids(self):
        """For each element of the block, the index of its variable in the group (padding
        counts as its variable's: its gradient is zero)."""
        return np.concatenate([np.full(n + pad, j, np.int32) for j, _, n, pad in self.pieces()]
                              or [np.zeros(0, np.int32)])

    def _with_padding(self, parts, pads):
        """`parts` (flat tensors) end to end, each followed by its padding's zeros."""
        out = []
        for part, pad in zip(parts, pads):
            out.append(part)
            if pad:
                out.append(tf.zeros([pad], part.dtype))
        if not out:
            return tf.zeros([0], self.dtype)
        return out[0] if len(out) == 1 else tf.concat(out, axis=0)

    def flatten(self, tensors):
        """The group's buffer, from one tensor per variable."""
        return self._with_padding([tf.reshape(t, [-1]) for t in tensors],
                                  [p - n for p, n in zip(self.padded, self.sizes)])

    def block_of(self, values):
        """This rank's block of `values` (one tensor per variable of the group)."""
        pieces = self.pieces()
        return self._with_padding(
            [tf.reshape(values[j], [-1])[first:first + n] for j, first, n, _ in pieces],
            [pad for _, _, _, pad in pieces])

    def unflatten(self, flat):
        """The group's buffer as one tensor per variable, shaped as it, each a view of the
        buffer's memory (TfringViews, see ALIGN_BYTES)."""
        return _library.ops().tfring_views(flat, offsets=self.offsets, shapes=self.shapes,
                                           N=len(self.shapes))


class ShardedUpdate:
    """The blocks of `variables` (all trainable variables an optimizer updates) on this rank,
    and the collectives of a sharded step.

    group_of(variable) -> a hashable that, with the dtype, decides the variable's group.
    """

    def __init__(self, variables, rank, size, kind, group_of=lambda v: None,
                 compression=Compression.none, op=collectives.Average,
                 gradient_predivide_factor=1.0):
        self.variables = list(variables)
        self.size = size
        keys, members = [], {}
        for i, v in enumerate(self.variables):
            key = (tf.as_dtype(v.dtype).name, group_of(v))
            if key not in members:
                keys.append(key)
                members[key] = []
            members[key].append(i)
        self.group_keys = keys
        self.members = [members[k] for k in keys]
        self.layouts = [GroupLayout([self.variables[i] for i in m], rank, size)
                        for m in self.members]
        self._ids = {id(v) for v in self.variables}
        labels = [_gradients.variable_label(v, i) for i, v in enumerate(self.variables)]
        digest = zlib.crc32("|".join(labels).encode())
        self._name = f"{kind}.{digest:08x}"
        self._compression = compression
        self._op, self._prescale, self._postscale = _gradients._scale_factors(
            op, gradient_predivide_factor, size)

    def holds(self, variable):
        """Whether `variable` is one of the variables laid out here (identity, not name)."""
        return id(variable) in self._ids

    def blocks_of(self, values):
        """This rank's block of each group, from one value per variable (weights, say)."""
        return [layout.block_of([values[i] for i in m])
                for layout, m in zip(self.layouts, self.members)]

    def reduce_scatter(self, grads):
        """This rank's block of each group's gradient, reduced over the ranks."""
        out = []
        for g, (layout, m) in enumerate(zip(self.layouts, self.members)):
            flat = layout.flatten([grads[i] for i in m])
            sent, ctx = self._compression.compress(flat)
            block = collectives.reducescatter(
                sent, op=self._op, prescale_factor=self._prescale,
                postscale_factor=self._postscale, name=f"{self._name}.block{g}.grad")
            out.append(self._compression.decompress(block, ctx))
        return out

    def allgather(self, blocks):
        """Every group's buffer from every rank's block, split into one value per variable
        (in the order of `variables`)."""
        out = [None] * len(self.variables)
        for g, (layout, m, block) in enumerate(zip(self.layouts, self.members, blocks)):
            flat = _data_movement.allgather(tf.convert_to_tensor(block),
                                            name=f"{self._name}.block{g}.weights")
            # A rank that joined (tfring.join: uneven data) adds no block: say so, rather
            # than fail to split a short buffer.
            whole = tf.debugging.assert_equal(
                tf.shape(flat)[0], layout.total, message=(
                    "shard_optimizer_state=True: a rank sent no block of the weights; has it "
                    "joined (tfring.join, uneven data)? Sharded state needs every rank in every "
                    "step: give every rank the same number of batches"))
            with tf.control_dependencies([whole]):
                flat = tf.identity(flat)
            for i, value in zip(m, layout.unflatten(flat)):
                out[i] = value
        return out

    def sum_over_ranks(self, tensor, what):
        """`tensor` summed over the ranks (the norms that clipping needs)."""
        return collectives.allreduce(tensor, op=collectives.Sum, name=f"{self._name}.{what}")

    def min_over_ranks(self, tensor, what):
        return collectives.allreduce(tensor, op=collectives.Min, name=f"{self._name}.{what}")
