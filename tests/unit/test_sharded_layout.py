"""The blocks of sharded optimizer state (tfring/_training/sharded_state.py), laid out for 1 to 4
ranks in one process: every element of every variable is in exactly one rank's block, the
padding keeps each variable's start aligned, and the split of a gathered buffer shares its
memory (the gathered weights reach the model without a copy)."""

import ctypes

import numpy as np
import pytest
import tensorflow as tf

from tfring._training import sharded_state as _sharded_state

SHAPES = [(3, 5), (1,), (7,), (0,), (4, 4, 2), (33,)]


def variables(dtype):
    rng = np.random.default_rng(7)
    return [tf.Variable(rng.normal(size=s).astype(dtype)) for s in SHAPES]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_blocks_cover_every_element_once_and_gather_back(dtype, size):
    vs = variables(dtype)
    layouts = [_sharded_state.GroupLayout(vs, r, size) for r in range(size)]
    itemsize = np.dtype(dtype).itemsize
    for offset in layouts[0].offsets:
        assert offset * itemsize % _sharded_state.ALIGN_BYTES == 0
    assert layouts[0].total * itemsize % _sharded_state.ALIGN_BYTES == 0
    lengths = [layout.length for layout in layouts]
    assert sum(lengths) == layouts[0].total and max(lengths) - min(lengths) <= 1

    blocks = [layout.block_of(vs).numpy() for layout in layouts]
    for layout, block in zip(layouts, blocks):
        assert block.shape == (layout.length,)
        assert len(layout.segment_ids()) == layout.length
    gathered = np.concatenate(blocks)
    # The buffer, written independently: each variable's values at its offset, zeros around.
    expected = np.zeros(layouts[0].total, dtype)
    for v, offset in zip(vs, layouts[0].offsets):
        expected[offset:offset + v.shape.num_elements()] = v.numpy().ravel()
    np.testing.assert_array_equal(gathered, expected)
    np.testing.assert_array_equal(layouts[0].flatten(vs).numpy(), expected)
    for v, value in zip(vs, layouts[0].unflatten(tf.constant(gathered))):
        np.testing.assert_array_equal(value.numpy(), v.numpy())

    # Each block element's segment is the variable whose (padded) range holds it.
    ids = np.concatenate([layout.segment_ids() for layout in layouts])
    for j, (offset, padded) in enumerate(zip(layouts[0].offsets, layouts[0].padded)):
        assert (ids[offset:offset + padded] == j).all()


def address(tensor):
    """Where a CPU tensor's elements are (its DLPack export tells; numpy may copy)."""
    capsule = tf.experimental.dlpack.to_dlpack(tensor)
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.c_void_p.from_address(get(capsule, b"dltensor")).value  # DLTensor.data


def test_the_split_of_a_gathered_buffer_shares_its_memory():
    """TensorFlow splits an aligned buffer into views of it: each piece's address is the
    buffer's plus its offset (unaligned, each piece would be a copy elsewhere)."""
    big = [tf.Variable(tf.zeros([100, 37])), tf.Variable(tf.zeros([5])),
           tf.Variable(tf.zeros([999]))]
    layout = _sharded_state.GroupLayout(big, 0, 1)
    flat = tf.range(layout.total, dtype=tf.float32)
    for part, offset in zip(layout.unflatten(flat), layout.offsets):
        assert address(part) == address(flat) + 4 * offset, part.shape


def test_views_refuse_pieces_outside_the_buffer_or_unaligned():
    from tfring._process import library
    flat = tf.zeros([64])
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside"):
        library.ops().tfring_views(flat, offsets=[48], shapes=[[17]], N=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="aligned"):
        library.ops().tfring_views(flat, offsets=[3], shapes=[[2]], N=1)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_groups_of_one_dtype_travel_as_rows_of_one_tensor(size):
    """Two groups of float32 (weight decay or not) and one of float64: the float32 groups
    are one reducescatter's rows, row r holding rank r's block of each group (zeros after a
    block shorter than the first rank's), so that the reducescatter hands each rank its
    blocks; the float64 group goes as its buffer."""
    vs = variables(np.float32)[:4] + variables(np.float64)[4:5] + variables(np.float32)[5:]
    decayed = {id(v) for v in vs[::2]}
    updates = [_sharded_state.ShardedUpdate(vs, r, size, "test",
                                            group_of=lambda v: id(v) in decayed)
               for r in range(size)]
    float32_groups, float64_groups = updates[0].batches
    assert len(float32_groups) == 2 and len(float64_groups) == 1
    rows = updates[0]._rows(vs, float32_groups).numpy()
    assert rows.shape[0] == size
    for r, update in enumerate(updates):
        row, offset = rows[r], 0
        for g in float32_groups:
            layout = update.layouts[g]
            block = layout.block_of([vs[i] for i in update.members[g]]).numpy()
            longest = layout.bounds[0][1]
            np.testing.assert_array_equal(row[offset:offset + layout.length], block)
            assert not row[offset + layout.length:offset + longest].any()
            offset += longest
        assert offset == len(row)
