"""What shard_optimizer_state=True refuses when the optimizer is built or at its first step
(Keras 3), each with an error that names the variable or the problem, on every rank; and
variable constraints, which the sharded step applies after gathering the weights.

Every refusal here is raised before the step's first collective, so each rank raises alone
and no rank is left waiting for another. Refusals at construction: test_sharded_optimizer.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring.keras as tk
from tfring._process import runtime

from _sharded_util import _assert_same_on_every_rank, _model, apply_steps, mean_gradients, \
    rank_gradients


def _sharded(inner=None):
    return tk.DistributedOptimizer(inner or keras.optimizers.SGD(0.1, momentum=0.9),
                                   shard_optimizer_state=True)


def _ones(variables):
    return [tf.ones_like(v) for v in variables]


@pytest.mark.parametrize("which", ["another-model", "reordered", "fewer"])
def test_a_step_refuses_variables_other_than_those_it_was_built_on(which):
    # The blocks are laid out for the variables given to build(): a step with others (even
    # of the same shapes), in another order, or fewer of them would split its gradients
    # into blocks of other variables.
    built = _model().trainable_variables
    optimizer = _sharded()
    optimizer.build(built)
    variables = {"another-model": _model().trainable_variables,
                 "reordered": built[::-1], "fewer": built[:-1]}[which]
    before = [v.numpy() for v in built]
    with pytest.raises(ValueError, match="every step must update the variables the optimizer "
                                         "was built on, in the same order"):
        optimizer.apply(_ones(variables), variables)
    for v, value in zip(built, before):  # nothing was applied
        np.testing.assert_array_equal(v.numpy(), value)


def test_a_step_refuses_a_job_whose_size_changed(monkeypatch, size):
    # An elastic reset changes tfring.size(); the blocks were laid out for the old size.
    # The reset itself needs an elastic job (tests/failure); the check reads only
    # runtime.size(), which is made to answer one rank more here. Raised before any
    # collective, so the real job (of `size` ranks) is not disturbed.
    variables = _model().trainable_variables
    optimizer = _sharded()
    optimizer.build(variables)
    monkeypatch.setattr(runtime, "size", lambda: size + 1)
    with pytest.raises(ValueError, match=f"laid out for {size} ranks and the job now has "
                                         f"{size + 1}: .*does not follow elastic changes"):
        optimizer.apply(_ones(variables), variables)


def test_a_step_refuses_a_variable_without_a_gradient():
    # Its elements share blocks with other variables': None cannot be reduced as a block.
    variables = _model().trainable_variables
    grads = _ones(variables)
    grads[2] = None
    with pytest.raises(ValueError, match=rf"no gradient for \['{variables[2].name}'\].*"
                                         r"freeze such variables \(trainable=False\)"):
        _sharded().apply(grads, variables)


def test_building_refuses_a_variable_overwritten_with_its_gradient():
    variables = _model().trainable_variables
    variables[1].overwrite_with_gradient = True  # as float8 training's scale variables
    with pytest.raises(ValueError, match=rf"variable '{variables[1].name}' is overwritten with "
                                         r"its gradient \(overwrite_with_gradient\)"):
        _sharded().build(variables)


def test_building_refuses_weight_decay_exclusions_that_name_its_blocks():
    # tfring names its block variables tfring_block<group>; an exclusion matching that name
    # would take a block that should decay out of weight decay, silently.
    adamw = keras.optimizers.AdamW(0.01, weight_decay=0.2)
    adamw.exclude_from_weight_decay(var_names=["block"])
    with pytest.raises(ValueError, match="exclude_from_weight_decay names match tfring's "
                                         "block variable 'tfring_block0'"):
        _sharded(adamw).build(_model().trainable_variables)


@pytest.mark.parametrize("make", [lambda: keras.optimizers.Adafactor(0.01),
                                  lambda: keras.optimizers.Lamb(0.01)], ids=["adafactor", "lamb"])
def test_optimizers_whose_state_is_not_element_by_element_are_refused(make):
    # Adafactor's factored moments, Lamb's whole-variable norms: a block would train them
    # differently from unsharded. Refused at construction, naming the optimizer.
    with pytest.raises(ValueError, match="needs an optimizer whose state is kept element by "
                                         "element; (Adafactor|Lamb) is not"):
        _sharded(make()).build(_model().trainable_variables)


def test_constraints_are_applied_after_the_sharded_step_as_unsharded(rank, size):
    """A kernel under MaxNorm (a norm over the whole variable, which no rank's block holds)
    and a bias under NonNeg: applied to the gathered weights on every rank, the result equals
    plain SGD's (which applies them after its update) on the averaged gradients."""
    def model():
        keras.utils.set_random_seed(3)
        x = keras.Input((6,))
        h = keras.layers.Dense(7, activation="tanh",
                               kernel_constraint=keras.constraints.MaxNorm(0.4),
                               bias_constraint=keras.constraints.NonNeg())(x)
        return keras.Model(x, keras.layers.Dense(1)(h))

    def make():
        return keras.optimizers.SGD(0.1, momentum=0.9)

    variables = model().trainable_variables
    optimizer = _sharded(make())
    optimizer.build(variables)
    got, _ = apply_steps(optimizer, variables, rank_gradients(variables, rank))
    reference = model().trainable_variables
    plain = make()
    plain.build(reference)
    want, _ = apply_steps(plain, reference, mean_gradients(reference, size))
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(np.concatenate(got))
    # The constraints bit: some bias clipped to 0, and the kernel's column norms at 0.4 (the
    # gradients alone would move them past it).
    kernel, bias = (v.numpy() for v in variables[:2])
    assert (bias == 0).any() and (bias >= 0).all(), bias
    norms = np.sqrt((kernel ** 2).sum(axis=0))
    assert np.isclose(norms, 0.4, rtol=1e-5).any() and (norms <= 0.4 * (1 + 1e-5)).all(), norms
