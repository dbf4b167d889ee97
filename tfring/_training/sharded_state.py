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
two). A step submits one reducescatter per dtype and one grouped allgather (one op, one
backend call) for all groups. The runtime reduces a reducescatter alone and of one dtype,
so the groups of one dtype travel as one tensor of `size` rows, row r holding rank r's
block of each group: the reducescatter hands rank r its row. A row is as long as the first
rank's blocks; the others' are one element shorter where a buffer does not divide, and
zeros fill them (a few elements per group more on the wire).
"""

import zlib

import numpy as np
import tensorflow as tf

from tfring import collectives
from tfring._ops import data_movement
from tfring._training import gradients as _gradients
from tfring._process import library
from tfring._ops import xla
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
        self.bounds = block_bounds(self.total, size)  # every rank's (start, length)
        self.start, self.length = self.bounds[rank]

    def pieces(self, rank=None):
        """[(variable index, first element in it, count, padding)] of the variables in this
        rank's block (or `rank`'s), in order: `count` of the variable's elements, then
        `padding` zeros."""
        start, length = (self.start, self.length) if rank is None else self.bounds[rank]
        out, end = [], start + length
        for j, (offset, n, padded) in enumerate(zip(self.offsets, self.sizes, self.padded)):
            first, last = max(offset, start), min(offset + padded, end)
            if first < last:
                count = max(0, min(last, offset + n) - first)
                out.append((j, min(first - offset, n), count, last - first - count))
        return out

    def segment_ids(self):
        """For each element of the block, the index of its variable in the group (padding
        counts as its variable's: its gradient is zero)."""
        return np.concatenate([np.full(n + pad, j, np.int32) for j, _, n, pad in self.pieces()]
                              or [np.zeros(0, np.int32)])

    @staticmethod
    def _with_padding(parts, pads):
        """`parts` (flat tensors), each followed by its padding's zeros, as a list."""
        out = []
        for part, pad in zip(parts, pads):
            out.append(part)
            if pad:
                out.append(tf.zeros([pad], part.dtype))
        return out

    def _concat(self, parts):
        if not parts:
            return tf.zeros([0], self.dtype)
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)

    def flatten(self, tensors):
        """The group's buffer, from one tensor per variable."""
        return self._concat(self._with_padding(
            [tf.reshape(t, [-1]) for t in tensors],
            [p - n for p, n in zip(self.padded, self.sizes)]))

    def block_parts(self, values, rank=None):
        """This rank's block (or `rank`'s) of `values` (one tensor per variable of the
        group), as a list of flat tensors to lay end to end."""
        parts = []
        for j, first, n, _ in self.pieces(rank):
            flat = tf.reshape(values[j], [-1])
            parts.append(flat if first == 0 and n == self.sizes[j] else flat[first:first + n])
        return self._with_padding(parts, [pad for _, _, _, pad in self.pieces(rank)])

    def block_of(self, values):
        """This rank's block of `values` (one tensor per variable of the group)."""
        return self._concat(self.block_parts(values))

    def unflatten(self, flat):
        """The group's buffer as one tensor per variable, shaped as it, each a view of the
        buffer's memory (TfringViews, see ALIGN_BYTES). Under XLA, slices: XLA places its
        own buffers, and TfringViews has no lowering."""
        if xla.in_xla_context():
            return [tf.reshape(flat[offset:offset + n], shape) for offset, n, shape
                    in zip(self.offsets, self.sizes, self.shapes)]
        return library.ops().tfring_views(flat, offsets=self.offsets, shapes=self.shapes,
                                           N=len(self.shapes))

    def placed(self, block):
        """This rank's block in a buffer of the group's size, zeros elsewhere: every rank's,
        summed, is the whole buffer, exactly (each element is one rank's value plus zeros)."""
        return tf.pad(block, [[self.start, self.total - self.start - self.length]])


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
        # The groups that travel as one tensor in the reducescatter: those of one dtype.
        batches = {}
        for g, layout in enumerate(self.layouts):
            batches.setdefault(layout.dtype, []).append(g)
        self.batches = list(batches.values())
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

    def _rows(self, grads, batch):
        """The buffers of the groups of `batch` (one dtype) as `size` rows, row r holding
        rank r's block of each group, zeros after a block shorter than the first rank's."""
        parts = []
        for r in range(self.size):
            for g in batch:
                layout = self.layouts[g]
                parts += layout.block_parts([grads[i] for i in self.members[g]], r)
                short = layout.bounds[0][1] - layout.bounds[r][1]
                if short:
                    parts.append(tf.zeros([short], layout.dtype))
        flat = tf.concat(parts, axis=0) if parts else tf.zeros([0], self.layouts[batch[0]].dtype)
        return tf.reshape(flat, [self.size, -1])

    def reduce_scatter(self, grads):
        """This rank's block of each group's gradient, reduced over the ranks."""
        sent, contexts = [], []
        for batch in self.batches:
            if len(batch) == 1:
                g = batch[0]
                flat = self.layouts[g].flatten([grads[i] for i in self.members[g]])
            else:
                flat = self._rows(grads, batch)
            tensor, ctx = self._compression.compress(flat)
            sent.append(tensor)
            contexts.append(ctx)
        reduced = collectives.grouped_reducescatter(
            sent, op=self._op, prescale_factor=self._prescale,
            postscale_factor=self._postscale, name=f"{self._name}.grad")
        out = [None] * len(self.layouts)
        for batch, block, ctx in zip(self.batches, reduced, contexts):
            block = self._compression.decompress(block, ctx)
            if len(batch) == 1:
                out[batch[0]] = block
                continue
            row, offset = tf.reshape(block, [-1]), 0
            for g in batch:
                out[g] = row[offset:offset + self.layouts[g].length]
                offset += self.layouts[g].bounds[0][1]
        return out

    def allgather(self, blocks):
        """Every group's buffer from every rank's block, split into one value per variable
        (in the order of `variables`)."""
        out = [None] * len(self.variables)
        blocks = [tf.convert_to_tensor(block) for block in blocks]
        if xla.in_xla_context():
            # An allgather's output shape depends on the other ranks, so it has no XLA
            # lowering; a sum of the placed blocks gives the same buffer (twice the bytes).
            gathered = collectives.grouped_allreduce(
                [layout.placed(block) for layout, block in zip(self.layouts, blocks)],
                op=collectives.Sum, name=f"{self._name}.weights")
        else:
            gathered = data_movement.grouped_allgather(blocks, name=f"{self._name}.weights")
        for layout, m, flat in zip(self.layouts, self.members, gathered):
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
