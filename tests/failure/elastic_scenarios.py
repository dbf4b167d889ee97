"""Elastic training scenarios in which workers are lost (tfring.elastic), each run by
test_elastic.py as `mpirun --with-ft ulfm -np 3 python elastic_scenarios.py NAME` (or under
tfringrun): a worker is killed, raises or hangs mid-training, and each survivor prints how it
finished ("rank R: ..." lines) for the test to read. Jobs that grow or shrink through host
discovery, and Keras' fit: elastic_growth_scenarios.py.
"""

import atexit
import os
import signal
import time

import tensorflow as tf

import tfring
from _elastic_training import batch_of, main, numpy_sgd, report, say


def _custom_loop(kills, raises=False, dies_in_reset=None, stops=None):
    """Horovod's elastic pattern with a custom loop (TensorFlowKerasState, @run, commit):
    the worker started as rank kills[b] dies at batch b (SIGKILL, or with `raises` an
    exception out of its training function, Horovod's exit_mode='exception'); the others roll
    back to their commit, re-form, and finish 20 batches. The worker started as rank
    `dies_in_reset` dies in the first reset callback, before the callback's allreduce that
    the others are in. Each survivor checks its weights against numpy's run of the same
    training."""
    import keras
    from tfring import elastic

    me = tfring.rank()  # as started: the kills name these
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.05)
    opt.build(model.trainable_variables)
    state = elastic.TensorFlowKerasState(model, opt, batch=0)
    sizes_at_reset = []

    pair = tfring.add_process_set([0, 1])  # ranks of the job as it started

    @tf.function
    def pair_sum():  # traced (below) before any reset, with the old numbering's set
        return tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name="old_pair_traced",
                                process_set=pair)

    if me in (0, 1):
        pair_sum()

    def on_reset():
        sizes_at_reset.append(tfring.size())
        print(f"rank {me}: reset at batch {state.batch}: now rank {tfring.rank()} of "
              f"{tfring.size()}", flush=True)
        if dies_in_reset is not None:
            if me == dies_in_reset:
                say(f"killing myself in the reset callback at {time.time():.3f}")
                os.kill(os.getpid(), signal.SIGKILL)
            workers_now = tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name="in_reset")
            say(f"the reset callback's allreduce counted {int(workers_now[0])} worker(s)")
        try:
            tfring.allreduce(tf.constant([1.0]), process_set=pair, name="old_pair")
            say("the old process set was used")
        except ValueError as e:
            print(f"rank {me}: old process set refused: {e}", flush=True)
        if tfring.size() > 2 and tfring.rank() in (0, 1):  # a set made anew works eagerly
            fresh = tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name="new_pair",
                                     process_set=tfring.ProcessSet([0, 1]))
            say(f"a process set made after the reset summed {fresh.numpy()[0]:g}")
        if tfring.rank() in (0, 1):
            try:
                pair_sum()
                say("the old process set was used in a function traced before the reset")
            except tf.errors.InvalidArgumentError as e:
                print(f"rank {me}: old process set refused in a traced function: "
                      f"{' '.join(e.message.split())}", flush=True)

    state.register_reset_callbacks([on_reset])
    start = []  # the weights every rank starts from: rank 0's, after run's first sync

    @elastic.run
    def train(state):
        if state.batch == 0:
            start[:] = [w.numpy().copy() for w in model.trainable_variables]
        while state.batch < 20:
            if kills.get(state.batch) == me and raises:
                say(f"raising at {time.time():.3f}")
                raise ValueError(f"worker {me} fails at batch {state.batch}")
            if kills.get(state.batch) == me:
                say(f"killing myself at {time.time():.3f}")
                os.kill(os.getpid(), signal.SIGKILL)
            if stops is not None and state.batch == 5 and me == stops:
                say(f"stopping myself at {time.time():.3f}")
                os.kill(os.getpid(), signal.SIGSTOP)
            x, y = batch_of(state.batch, tfring.rank())
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            tape = tfring.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            state.batch += 1
            state.commit()

    workers = tfring.size()
    try:
        train(state)
    except RuntimeError:
        print(f"rank {me}: stopped at {time.time():.3f}", flush=True)
        if os.environ.get("TFRING_TEST_EXIT_BARRIER"):
            # Runs before the library's finalize at exit (atexit: the last registered first)
            # and after Python has printed the error.
            atexit.register(_exit_barrier, os.environ["TFRING_TEST_EXIT_BARRIER"], me)
        raise
    schedule = []
    first_kill = min(kills, default=None)
    for step in range(20):  # each kill leaves one worker fewer from its batch on
        lost = sum(1 for b in kills if b <= step)
        lost += dies_in_reset is not None and step >= first_kill
        schedule.append((workers - lost, step, 0.05))
    report(state, [v.numpy() for v in model.trainable_variables], numpy_sgd(start, schedule),
           sizes_at_reset, me)
    tfring.shutdown()


def _exit_barrier(spec, me):
    """TFRING_TEST_EXIT_BARRIER=FOLDER,COUNT: this worker waits at exit, its error printed,
    until COUNT workers have come this far. A worker that ends without MPI_Finalize (the
    finalize deadline at 0 s) makes mpirun end the others at once: without the wait, one
    still printing why it stopped could be cut off."""
    folder, count = spec.rsplit(",", 1)
    with open(os.path.join(folder, f"exiting.{me}"), "w"):
        pass
    deadline = time.monotonic() + 60
    while (len([n for n in os.listdir(folder) if n.startswith("exiting.")]) < int(count)
           and time.monotonic() < deadline):
        time.sleep(0.02)


def elastic_custom_loop():
    _custom_loop({8: 2})  # of 3 workers


def elastic_lost_in_reset():
    _custom_loop({8: 2}, dies_in_reset=1)  # of 3 workers: rank 0 finishes alone


def elastic_peer_stopped():
    _custom_loop({}, stops=2)  # of 3 workers: rank 2 stops answering (SIGSTOP) at batch 5


def elastic_worker_raises():
    _custom_loop({8: 2}, raises=True)  # of 3 workers


def elastic_every_worker_raises():
    """Every worker's code raises at batch 3 (a bug, say): none can go on."""
    from tfring import elastic

    tfring.init()
    state = elastic.ObjectState(batch=0)

    @elastic.run
    def train(state):
        while state.batch < 10:
            tfring.allreduce(tf.constant([1.0]), name="step")
            if state.batch == 3:
                raise ValueError(f"worker {tfring.rank()} fails at batch 3")
            state.batch += 1
            state.commit()

    train(state)


def elastic_across_hosts():
    # Of 4 workers, 2 per host (tests/multihost/test_elastic_across_hosts.py): the one lost
    # is on the second host, and the 3 left span both.
    _custom_loop({8: 3})


def elastic_two_kills():
    _custom_loop({4: 3, 8: 2})  # of 4 workers


def elastic_rank0_lost_uncommitted():
    """3 workers commit every 3 batches; rank 0 dies after batch 4, so the survivors (old
    ranks 1 and 2) are in batch 5's allreduce with batches 3 and 4 done but not committed:
    they must roll back to the commit at batch 3 and do 3 and 4 again as 2. The reset hook
    and callbacks print the new numbering at once; the callback then spoils the weights on
    the new rank 1, which only the state's sync from the new rank 0 puts right. Each
    survivor checks its weights against numpy's run of the schedule kept."""
    import keras
    from tfring import elastic

    me = tfring.rank()  # as started
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.05)
    opt.build(model.trainable_variables)
    sizes_at_reset = []

    class State(elastic.TensorFlowKerasState):
        def reset(self):  # Horovod's hook: after the job is re-formed, before the callbacks
            sizes_at_reset.append(tfring.size())
            print(f"rank {me}: reset hook: now rank {tfring.rank()} of {tfring.size()}, local "
                  f"rank {tfring.local_rank()} of {tfring.local_size()}", flush=True)

    state = State(model, opt, batch=0)

    def on_reset():
        print(f"rank {me}: callback after the hook at batch {state.batch}", flush=True)
        if tfring.rank() != 0:
            for v in model.trainable_variables:
                v.assign_add(tf.ones_like(v) * 100.0)

    state.register_reset_callbacks([on_reset])
    start = []

    @elastic.run
    def train(state):
        if state.batch == 0:
            start[:] = [w.numpy().copy() for w in model.trainable_variables]
        while state.batch < 12:
            if state.batch == 5 and me == 0:
                say(f"killing myself at {time.time():.3f}")
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = batch_of(state.batch, tfring.rank())
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tfring.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            state.batch += 1
            if sizes_at_reset and not resumed:  # the recovery, kill to next step, measured
                resumed.append(time.time())
                print(f"rank {me}: first step after the reset done at {resumed[0]:.3f}",
                      flush=True)
            if state.batch % 3 == 0:
                state.commit()

    resumed = []
    train(state)
    schedule = [(3 if step < 3 else 2, step, 0.05) for step in range(12)]
    report(state, [v.numpy() for v in model.trainable_variables], numpy_sgd(start, schedule),
           sizes_at_reset, me)
    tfring.shutdown()


def tf1_session():
    """A TF1 graph and session with TensorFlowState (all global variables) and Horovod's TF1
    DistributedOptimizer, committing every 3 batches: rank 2 dies at batch 8 of 20; the
    survivors load the values committed at batch 6 back (through the session), re-form as 2,
    do batches 6 and 7 again as 2 and finish."""
    from tfring import elastic

    tf.compat.v1.disable_eager_execution()
    me = tfring.rank()
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w = tf.compat.v1.get_variable("w", [4, 1])
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    opt = tfring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05))
    train_op = opt.minimize(loss)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        state = elastic.TensorFlowState(session=session, batch=0)
        sizes_at_reset = []
        state.register_reset_callbacks([lambda: sizes_at_reset.append(tfring.size())])
        start = []

        @elastic.run
        def train(state):
            if state.batch == 0:
                start[:] = session.run([w, b])
            while state.batch < 20:
                if state.batch == 8 and me == 2:
                    say(f"killing myself at {time.time():.3f}")
                    os.kill(os.getpid(), signal.SIGKILL)
                xs, ys = batch_of(state.batch, tfring.rank())
                session.run(train_op, {x: xs, y: ys})
                state.batch += 1
                if state.batch % 3 == 0:
                    state.commit()

        train(state)
        schedule = [(3 if step < 6 else 2, step, 0.05) for step in range(20)]
        report(state, session.run([w, b]), numpy_sgd(start, schedule), sizes_at_reset, me)
    tfring.shutdown()


if __name__ == "__main__":
    main(globals())
