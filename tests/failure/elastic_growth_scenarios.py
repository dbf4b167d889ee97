"""Elastic scenarios under tfringrun whose job changes through host discovery: it grows to a
slot offered, gives one back, replaces a lost worker on a host offered, and Horovod's Keras
elastic example loses a worker and grows again. test_elastic.py runs each as `tfringrun
--host-discovery-script "cat $TFRING_TEST_HOSTS" ... python elastic_growth_scenarios.py
NAME`; every worker prints how it finished ("rank R: ..." lines) for the test to read.
"""

import os
import signal
import time

import numpy as np
import tensorflow as tf

import tfring
from _elastic_training import JOINED, batch_of, initial_weights, main, numpy_sgd, report, say


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
    main(globals())
