"""A consumed argument to a transform is a transfer of ownership (issue 39).

``ember.grad(f)(ember.consume(x))`` crashed with an AttributeError from deep
inside the transform and left x dead. The transform now takes the marker's
buffer over as any op does: x is dead afterwards (that is what consume
means), the gradient is right, and the marker cannot be handed on twice.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember

xp = ember.autodiff.namespace("numpy")


def test_grad_of_a_consumed_tensor():
    x = xp.asarray([1.0, 2.0])
    g = ember.grad(lambda t: xp.sum(t * t))(ember.consume(x))
    np.testing.assert_array_equal(g.raw, [2.0, 4.0])
    with pytest.raises(ember.ConsumedError):
        x + 1.0  # handed over at the consume() line, as everywhere


def test_vjp_and_jvp_of_a_consumed_tensor():
    out, pull = ember.vjp(lambda t: t * 3.0, ember.consume(xp.asarray([1.0, 2.0])))
    np.testing.assert_array_equal(out.raw, [3.0, 6.0])
    np.testing.assert_array_equal(pull(xp.ones(2))[0].raw, [3.0, 3.0])
    y, t = ember.jvp(lambda a: a * a, (ember.consume(xp.asarray([1.0, 2.0])),), (xp.ones(2),))
    np.testing.assert_array_equal(y.raw, [1.0, 4.0])
    np.testing.assert_array_equal(t.raw, [2.0, 4.0])


def test_a_consumed_structure():
    g = ember.grad(lambda d: xp.sum(d["w"] ** 2))(ember.consume({"w": xp.asarray([1.0, 2.0])}))
    np.testing.assert_array_equal(g["w"].raw, [2.0, 4.0])


def test_a_marker_is_handed_over_once():
    c = ember.consume(xp.asarray([1.0, 2.0]))
    ember.grad(lambda t: xp.sum(t))(c)
    with pytest.raises(ember.ConsumedError, match="already handed to `a transform"):
        ember.grad(lambda t: xp.sum(t))(c)
