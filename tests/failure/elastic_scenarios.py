"""Elastic training scenarios (tfring.elastic, tfring.keras.elastic), each run by
test_failures.py as `mpirun --with-ft ulfm -np 3 python elastic_scenarios.py NAME`: a worker
is killed mid-training, and each survivor prints how it finished ("rank R: ..." lines) for
the test to read.
"""

import atexit
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

import tfring

TRUE_W = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)


def say(text):
    print(f"rank {tfring.rank()}: {text}", flush=True)


def batch_of(step, worker, rows=8):
    """Worker `worker`'s batch `step` of a linear regression every rank can recompute."""
    x = np.random.default_rng(100 * step + worker).normal(size=(rows, 4)).astype(np.float32)
    return x, x @ TRUE_W


JOINED = 99  # initial_weights' identity for a worker started to grow the job


def initial_weights(identity):
    """The Dense(1) weights a worker starts with, its own (the state's first sync gives every
    worker rank 0's): `identity` is the rank a first worker was started as, or JOINED.
    Every worker can recompute any worker's, for numpy's replay."""
    rng = np.random.default_rng(1000 + identity)
    return [rng.normal(size=(4, 1)).astype(np.float32), rng.normal(size=(1,)).astype(np.float32)]


def _gradients(w, b, step, worker):
    x, y = batch_of(step, worker)
    err = x @ w + b - y
    return 2 * x.T @ err / err.size, 2 * err.sum(axis=0) / err.size


def numpy_sgd(start, schedule):
    """Replays training in float64: `schedule` lists (workers, batch index, learning rate)
    per step; each step averages the workers' mean-squared-error gradients, as tfring does.
    A step may carry a fourth item, {worker: (w, b)}: workers that compute their gradient
    at weights of their own (not yet synced from rank 0); the update is rank 0's."""
    w, b = start[0].astype(np.float64), start[1].astype(np.float64)
    for workers, step, lr, *own in schedule:
        at = {k: (v[0].astype(np.float64), v[1].astype(np.float64))
              for k, v in (own[0] if own else {}).items()}
        grads = [_gradients(*at.get(worker, (w, b)), step, worker) for worker in range(workers)]
        w = w - lr * np.mean([g[0] for g in grads], axis=0)
        b = b - lr * np.mean([g[1] for g in grads], axis=0)
    return w, b


def report(state, values, expected, sizes_at_reset, me):
    """Prints how this survivor finished: `values` are its final weights and bias."""
    got_w, got_b = values
    close = np.allclose(got_w, expected[0], rtol=1e-4, atol=1e-5) and np.allclose(
        got_b, expected[1], rtol=1e-4, atol=1e-5)
    print(f"rank {me}: finished at epoch {getattr(state, 'epoch', '-')} batch {state.batch} "
          f"as rank {tfring.rank()} of {tfring.size()}, resets saw sizes {sizes_at_reset}, "
          f"matches numpy: {close}, weights {got_w.ravel().tolist()} {got_b.tolist()}",
          flush=True)


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


def _offer(text):
    """Rank 0 rewrites what the discovery script prints, then waits until tfringrun has read
    it (its hosts file, which the commits read, shows the new hosts): the job then changes
    at this batch's commit, as the scenario plans, whatever the discovery's pace."""
    from tfring._elastic.members import HOSTS_FILE, read_hosts_file

    _write_hosts(text)
    wanted = [(host, int(slots)) for host, _, slots in (line.rpartition(":")
                                                         for line in text.split())]
    deadline = time.monotonic() + 60
    while read_hosts_file(os.environ[HOSTS_FILE]) != wanted:
        if time.monotonic() > deadline:
            raise TimeoutError(f"tfringrun's host discovery did not report {wanted} in 60 s")
        time.sleep(0.02)
    say(f"the discovery reports {wanted} at {time.time():.3f}")


def _joined():
    """Whether this worker was started by the job to grow it (MPI_Comm_spawn)."""
    return "OMPI_PARENT_PORT" in os.environ


def _discovered_loop(event, planned_size):
    """A custom loop under tfringrun --host-discovery-script "cat $TFRING_TEST_HOSTS" whose
    job changes size: `event(batch)` (run by every worker before each batch) may rewrite
    that file (then waiting for the discovery to report it: _offer) or kill this worker.
    `planned_size(batch)` is how many workers the scenario plans for each batch the job
    keeps. The reset callbacks scale the learning rate to the new size. At the end every
    worker, joined ones too, checks its weights against numpy's replay of that plan from
    rank 0's initial weights, and the schedule the state carries (rolled back with the
    rest) against it."""
    import keras
    from tfring import elastic

    base_lr = 0.02
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.set_weights(initial_weights(JOINED if _joined() else tfring.rank()))
    opt = keras.optimizers.SGD(base_lr * tfring.size())
    state = elastic.TensorFlowKerasState(model, opt, batch=0, schedule=())
    sizes_at_reset = []

    def on_reset():
        sizes_at_reset.append(tfring.size())
        opt.learning_rate.assign(base_lr * tfring.size())
        say(f"reset at batch {state.batch}: now of {tfring.size()}, at {time.time():.3f}")

    state.register_reset_callbacks([on_reset])
    say(f"started as rank {tfring.rank()} of {tfring.size()} at {time.time():.3f}")

    @elastic.run
    def train(state):
        while state.batch < 40:
            event(state.batch)
            x, y = batch_of(state.batch, tfring.rank())
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tfring.DistributedGradientTape(tape).gradient(
                loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            state.schedule += ((tfring.size(), state.batch,
                                round(float(opt.learning_rate.numpy()) / base_lr, 4)),)
            state.batch += 1
            state.commit()

    train(state)
    plan = [(planned_size(step), step, base_lr * planned_size(step)) for step in range(40)]
    kept = [(n, step, float(n)) for n, step, _ in plan]
    say(f"the state's schedule is the plan's: {list(state.schedule) == kept}")
    report(state, [v.numpy() for v in model.trainable_variables],
           numpy_sgd(initial_weights(0), plan), sizes_at_reset, tfring.rank())
    tfring.shutdown()


def _write_hosts(text):
    with open(os.environ["TFRING_TEST_HOSTS"], "w") as f:
        f.write(text)
    say(f"wrote hosts {text.split()} at {time.time():.3f}")


GROW_AT, SHRINK_AT = 3, 6


def elastic_grows_then_shrinks():
    """Started as 2 workers on 'localhost:2'; before batch GROW_AT rank 0 offers a third slot:
    at that batch's commit the job grows to 3 (the third worker is this script, spawned).
    Before batch SHRINK_AT rank 0 takes the slot back: at that batch's commit the worker on
    it leaves (its process ends) and the other 2 go on."""
    grown_at = []

    def event(batch):
        if tfring.size() == 3 and not grown_at:
            grown_at.append(batch)
            say(f"local rank {tfring.local_rank()} of {tfring.local_size()}")
        if tfring.rank() != 0:
            return
        if batch == GROW_AT and tfring.size() == 2:
            _offer("localhost:3\n")
        if batch == SHRINK_AT and tfring.size() == 3:
            _offer("localhost:2\n")

    _discovered_loop(event, lambda step: 3 if GROW_AT < step <= SHRINK_AT else 2)


def elastic_replaced():
    """Started as 3 workers on 'localhost:3' with --min-np 3; at batch 8 rank 2 offers a new
    host ('127.0.0.1', this machine under another name) and dies. localhost is blacklisted
    for the loss, so the 2 left wait for the discovery to offer a worker elsewhere, start it
    on 127.0.0.1 and go on as 3 from their last commit (batch 8: nothing to do again)."""
    def event(batch):
        if batch == 8 and tfring.rank() == 2 and tfring.size() == 3 and not _joined():
            _write_hosts("localhost:3\n127.0.0.1:1\n")
            say(f"killing myself at {time.time():.3f}")
            os.kill(os.getpid(), signal.SIGKILL)

    _discovered_loop(event, lambda step: 3)


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


def _fit(hvd, model, state, steps, epochs, callbacks):
    """model.fit on this rank's `steps` batches, from the committed epoch on."""
    batches = [batch_of(step, hvd.rank()) for step in range(steps)]
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    model.fit(x, y, batch_size=8, shuffle=False, epochs=epochs - state.epoch,
              callbacks=callbacks, verbose=0)


def _keras_fit_plan(as_is, base_lr):
    """keras_fit's steps, as the scenario plans them: (the fit batches the state's schedule
    must hold: (workers, batch, rate in base rates)), (every step the weights went through,
    for numpy_sgd). Epochs of 6 batches, a commit after every 2nd batch and at each epoch's
    end; 3 workers; one lost at batch 3 of epoch 1."""
    batches, steps = [], []

    def fit_batches(workers, count):
        for batch in range(count):
            batches.append((workers, batch, float(workers)))
            steps.append((workers, batch, base_lr * workers))

    if as_is:  # the step before the state, each first worker from its own initial weights
        steps.append((3, 0, base_lr * 3, {r: initial_weights(r) for r in range(3)}))
    fit_batches(3, 6)  # epoch 0
    fit_batches(3, 2)  # epoch 1 to its commit after batch 1 (batch 2 is undone: the loss)
    if as_is:  # the reset callback's step, as 2
        steps.append((2, 0, base_lr * 2))
    fit_batches(2, 2)  # epoch 1 again, as 2, to the commit at which the new worker joins
    if as_is:  # the reset callback's step, paired with the new worker's step before its state
        steps.append((3, 0, base_lr * 3, {2: initial_weights(JOINED)}))
    for _ in range(3):  # epoch 1 again, as 3, then epochs 2 and 3
        fit_batches(3, 6)
    return batches, steps


def keras_fit():
    """Horovod's Keras elastic example (tensorflow2_keras_mnist_elastic.py) with the import
    changed: KerasState, the three callbacks, a reset callback that scales the learning rate
    to the new size, @hvd.elastic.run around model.fit; under tfringrun with a discovery
    script that prints $TFRING_TEST_HOSTS ('localhost:3' at the start).

    Rank 2 dies at batch 3 of epoch 1 (a commit every 2 batches): the survivors roll back to
    the commit after batch 1, undoing batch 2, and go on as 2, with the learning rate for 2
    (localhost, which lost a worker, gets no new one: it is blacklisted). Keras runs whole
    epochs: the interrupted one starts again at its first batch, from its last commit's
    weights. After that epoch's batch 1, rank 0 offers a host elsewhere ('127.0.0.1:1', this
    machine by another name): at the commit after it `fit` stops on both
    (HostsUpdatedInterrupt), a worker started on 127.0.0.1 joins with the state synced from
    rank 0, and `fit` goes on as 3 from the committed epoch, which starts again. Every worker
    checks its weights against numpy's replay of that plan (_keras_fit_plan), and the
    schedule the state carries (rolled back with the rest) against the plan. Keras 3, or
    tf_keras when the test sets TF_USE_LEGACY_KERAS=1."""
    import tfring.keras as hvd

    keras = tf.keras
    say("runs tf_keras" if keras.__name__.startswith("tf_keras") else "runs Keras 3")
    joined = _joined()
    steps, epochs, base_lr = 6, 4, 0.02
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.set_weights(initial_weights(JOINED if joined else hvd.rank()))
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(base_lr * hvd.size())),
                  loss="mse")
    # As Horovod's example itself (TFRING_TEST_EXAMPLE_AS_IS): one step of fit before the
    # state is made (it makes the optimizer's variables) and one in the reset callback, in
    # which the ranks already there meet a joining worker's first step, taken from its own
    # initial weights. numpy's replay has those steps too (_keras_fit_plan).
    as_is = os.environ.get("TFRING_TEST_EXAMPLE_AS_IS") == "1"
    first = batch_of(0, hvd.rank())
    if as_is:
        model.fit(*first, batch_size=8, steps_per_epoch=1, epochs=1, callbacks=None, verbose=0)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0, schedule=())
    sizes_at_reset = []

    def on_state_reset():
        sizes_at_reset.append(hvd.size())
        model.optimizer.learning_rate.assign(base_lr * hvd.size())
        if as_is:
            model.fit(*first, batch_size=8, steps_per_epoch=1, epochs=1, callbacks=None,
                      verbose=0)

    state.register_reset_callbacks([on_state_reset])
    offered = []

    class KillAndSchedule(keras.callbacks.Callback):
        """The loss and the offer; before the commit: which batch ran on how many workers,
        at what rate."""

        def on_epoch_begin(self, epoch, logs=None):
            self.current_epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if hvd.rank() == 2 and not joined and self.current_epoch == 1 and batch == 3:
                say(f"killing myself at {time.time():.3f}")
                os.kill(os.getpid(), signal.SIGKILL)

        def on_train_batch_end(self, batch, logs=None):
            lr = float(keras.backend.get_value(model.optimizer.learning_rate))
            state.schedule += ((hvd.size(), batch, round(lr / base_lr, 4)),)
            if hvd.size() == 2 and hvd.rank() == 0 and batch == 1 and not offered:
                offered.append(batch)
                _offer("localhost:3\n127.0.0.1:1\n")  # before this batch's commit

    commit = hvd.elastic.CommitStateCallback(state, batches_per_commit=2)
    callbacks = [KillAndSchedule(), commit,
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]
    if as_is:  # the example's order
        callbacks = callbacks[:1] + callbacks[:0:-1]

    hvd.elastic.run(lambda state: _fit(hvd, model, state, steps, epochs, callbacks))(state)
    scaled = sorted({(n, rate) for n, _, rate in state.schedule})
    say(f"learning rate per job size, in base rates: {scaled}")
    batches, plan = _keras_fit_plan(as_is, base_lr)
    say(f"the state's schedule is the plan's: {list(state.schedule) == batches}")
    report(state, [v.numpy() for v in model.trainable_variables],
           numpy_sgd(initial_weights(0), plan), sizes_at_reset, hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    if os.environ.get("TFRING_TEST_SPAWNED_FAIL") and "OMPI_PARENT_PORT" in os.environ:
        print("a spawned worker fails before it joins", flush=True)
        sys.exit(3)
    tfring.init()
    globals()[sys.argv[1]]()
