"""allgather_object / broadcast_object / broadcast_object_fn eagerly and in TF1 graphs (with
the caller's session, the default session, or none), as Horovod's."""

import tensorflow as tf

import tfring


def _payload(rank):
    return {"rank": rank, "text": "x" * (rank + 1), "list": list(range(rank))}


def test_eager(rank, size):
    assert tfring.allgather_object(_payload(rank)) == [_payload(r) for r in range(size)]
    assert tfring.broadcast_object(_payload(rank), root_rank=size - 1) == _payload(size - 1)
    bcast = tfring.broadcast_object_fn(root_rank=0)
    assert bcast(_payload(rank)) == _payload(0) and bcast("again" * rank) == ""


def test_tf1_graph_with_a_session(rank, size):
    with tf.Graph().as_default():
        with tf.compat.v1.Session() as session:
            got = tfring.allgather_object(_payload(rank), session=session)
            root = tfring.broadcast_object(_payload(rank), 0, session=session)
    assert got == [_payload(r) for r in range(size)] and root == _payload(0)


def test_tf1_graph_default_session_or_none(rank, size):
    with tf.Graph().as_default():
        with tf.compat.v1.Session().as_default():
            got = tfring.broadcast_object(_payload(rank), size - 1)
        alone = tfring.allgather_object(rank)  # no session at all: one is made for it
    assert got == _payload(size - 1) and alone == list(range(size))
