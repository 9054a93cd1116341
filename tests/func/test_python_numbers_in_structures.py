"""grad of a structure holding Python numbers and no array: an error, not the numbers back.

A structure keeps plain Python numbers as constants (docs: gradients), so
``grad(f)([1.0, 2.0])`` returned ``[1.0, 2.0]`` as the "gradient" without a
word: issue 40's "a Python float input is returned as its own gradient",
one level down. A lone Python float is differentiated; a structure with
arrays keeps its numbers as constants, as before.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.func._transforms import PYTHON_NUMBERS_ARG

xp = ember.autodiff.namespace("numpy")


@pytest.mark.parametrize("arg", [[1.0, 2.0], (3, 4.0), {"a": 1.0, "b": None}, [[0.5], {"c": 1j}]],
                         ids=["list", "tuple", "dict", "nested"])
def test_a_structure_of_python_numbers_raises_naming_the_fix(arg):
    with pytest.raises(ember.NotDifferentiableError) as e:
        ember.grad(lambda t: xp.asarray(2.0))(arg)
    msg = str(e.value)
    assert msg.startswith(f"grad: argument 0 is a {type(arg).__name__} of Python numbers")
    assert "xp.asarray" in msg and "Fix:" in msg
    assert PYTHON_NUMBERS_ARG.split("{kind}", 1)[1].split("{", 1)[0] in msg


def test_value_and_grad_and_argnums_name_the_argument():
    with pytest.raises(ember.NotDifferentiableError, match="argument 1 is a list"):
        ember.value_and_grad(lambda x, p: xp.sum(x) * p[0], argnums=(0, 1))(xp.ones(2), [2.0])


def test_what_stays_as_it_was():
    g = ember.grad(lambda d: xp.sum(d["w"] * d["w"]) * d["eps"])({"w": xp.asarray([1.0, 2.0]), "eps": 3.0})
    np.testing.assert_array_equal(g["w"].raw, [6.0, 12.0])
    assert g["eps"] == 3.0  # a constant next to arrays: kept, as documented
    assert float(ember.grad(lambda t: t * t)(3.0)) == 6.0
    assert ember.grad(lambda t: xp.asarray(1.0))([]) == []  # nothing at all to differentiate
    assert ember.grad(lambda t: xp.asarray(1.0))(None) is None
    # a structure of Python numbers outside argnums is a constant argument, as before
    g = ember.grad(lambda x, p: xp.sum(x) * p[0])(xp.ones(2), [2.0])
    np.testing.assert_array_equal(g.raw, [2.0, 2.0])
