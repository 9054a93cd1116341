"""float()/int()/bool()/complex()/index of a traced tensor: never a silently cut gradient.

A Python number carries no gradient, so converting a floating tensor that an
open transform tracks would make everything computed from it wrong without a
word. Those conversions raise NotDifferentiableError naming the fix; values
without a gradient (bool and integer tensors: comparisons used for control
flow, argmax used as an index) and untracked tensors convert as before.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.autodiff._tensor import TRACED_TO_SCALAR

xp = ember.autodiff.namespace("numpy")

FIX = "ember.stop_gradient"


@pytest.mark.parametrize("kind", [float, int, bool, complex])
def test_converting_a_traced_float_raises_naming_the_fix(kind):
    def f(t):
        return xp.sum(t) * kind(t[0])

    with pytest.raises(ember.NotDifferentiableError, match=f"{kind.__name__}\\(\\) of a float64") as e:
        ember.grad(f)(xp.asarray([3.0, 1.0, 2.0]))
    assert FIX in str(e.value)
    assert TRACED_TO_SCALAR.split("{")[0] in str(e.value)


def test_index_of_a_traced_float_raises():
    with pytest.raises(ember.NotDifferentiableError, match="index"):
        ember.grad(lambda t: xp.sum(t) * [1.0, 2.0][t[0].__index__()])(xp.asarray([1.0, 2.0]))


def test_the_issue_example_has_its_true_gradient_with_stop_gradient_or_as_an_array():
    x = xp.asarray([3.0, 1.0, 2.0])
    # kept an array: the product rule gives [sum + x0, x0, x0] = [9, 3, 3]
    g = ember.grad(lambda t: xp.sum(t) * t[0])(x)
    np.testing.assert_array_equal(g.raw, [9.0, 3.0, 3.0])
    # a constant on purpose: [x0, x0, x0]
    g = ember.grad(lambda t: xp.sum(t) * float(ember.stop_gradient(t[0])))(x)
    np.testing.assert_array_equal(g.raw, [3.0, 3.0, 3.0])


def test_control_flow_on_comparisons_and_integer_indices_still_works():
    def f(t):
        i = int(xp.argmax(t))  # an integer array: no gradient to cut
        if bool(xp.any(t > 2.0)):  # a bool array: control flow
            return t[i] * t[i]
        return xp.sum(t)

    g = ember.grad(f)(xp.asarray([3.0, 1.0, 2.0]))
    np.testing.assert_array_equal(g.raw, [6.0, 0.0, 0.0])


def test_untracked_and_finished_tensors_convert_as_before():
    x = xp.asarray(2.5)
    assert float(x) == 2.5 and int(x) == 2 and bool(x) and complex(x) == 2.5
    kept = []
    ember.grad(lambda t: (kept.append(t), t * t)[1])(x)
    assert float(kept[0]) == 2.5  # its trace has closed: a plain value now


def test_nested_inner_value_converts_only_when_no_open_trace_tracks_it():
    def inner(t):
        return t * t

    def outer(t):
        g = ember.grad(inner)(t)  # tracked by the outer trace
        with pytest.raises(ember.NotDifferentiableError):
            float(g)
        return g * t

    np.testing.assert_allclose(ember.grad(outer)(xp.asarray(3.0)).raw, 12.0)
