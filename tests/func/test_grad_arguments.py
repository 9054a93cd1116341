"""What grad differentiates: Python floats, integer inputs and outputs, argnums.

Never a silently wrong gradient: a Python float argument is differentiated
(as a 0-d array, as JAX does), an integer or bool argument or output and a
complex output raise NotDifferentiableError saying what to do, a repeated
argnums entry gets the full gradient each time, and a malformed argnums is a
clear error naming grad.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.func._transforms import (
    BAD_ARGNUMS,
    COMPLEX_OUTPUT_FIX,
    INTEGER_OUTPUT_FIX,
    NOT_DIFFERENTIABLE_ARG,
)

xp = ember.autodiff.namespace("numpy")


def _head(template):
    """The fixed text of an error template after its first field."""
    return template.split("}", 1)[1].split("{", 1)[0]


def test_a_python_float_is_differentiated_as_a_0d_array():
    g = ember.grad(lambda t: t * t)(3.0)
    assert isinstance(g, ember.Tensor) and g.ndim == 0 and g.dtype == xp.float64
    assert float(g) == 6.0
    v, g = ember.value_and_grad(lambda a, b: a * b * b, argnums=(0, 1))(2.0, 3.0)
    assert float(v) == 18.0 and [float(x) for x in g] == [9.0, 12.0]


def test_a_python_float_takes_the_namespace_of_the_other_arrays():
    xs = ember.autodiff.namespace("array_api_strict")
    g = ember.grad(lambda s, x: xs.sum(s * x))(2.0, xs.asarray([1.0, 2.0]))
    assert float(g) == 3.0
    assert type(g)._ns is xs


def test_vjp_of_a_python_float():
    out, pull = ember.vjp(lambda t: t * t, 3.0)
    assert float(out) == 9.0
    assert float(pull(xp.asarray(1.0))[0]) == 6.0


#: arrays with nothing to differentiate
NOT_FLOATING = pytest.mark.parametrize("x", [
    np.arange(3) + 5,
    xp.arange(3),
    xp.asarray([True, False]),
], ids=["numpy-int", "tensor-int", "bool"])


@NOT_FLOATING
def test_integer_or_bool_array_arguments_raise(x):
    with pytest.raises(ember.NotDifferentiableError, match="argument 0") as e:
        ember.grad(lambda a: xp.sum(a ** 2))(x)
    assert "no floating-point array to differentiate" in str(e.value)
    assert isinstance(e.value, TypeError)


@NOT_FLOATING
def test_vjp_with_nothing_floating_raises_and_keeps_integer_arguments_beside_floats(x):
    with pytest.raises(ember.NotDifferentiableError, match="vjp: no argument holds a floating") as e:
        ember.vjp(lambda a: a * 2.0, x)
    assert str(x.dtype) in str(e.value)
    w = xp.asarray([1.0, 2.0, 3.0])
    out, pull = ember.vjp(lambda a, i: a[i], w, xp.asarray([2, 0]))  # indices beside a float array
    gw, gi = pull(xp.asarray([10.0, 1.0]))
    np.testing.assert_array_equal(gw.raw, [1.0, 0.0, 10.0])
    np.testing.assert_array_equal(gi.raw, [2, 0])  # a constant keeps its value


def test_python_int_argument_raises():
    with pytest.raises(ember.NotDifferentiableError, match="the Python int 3"):
        ember.grad(lambda a: xp.asarray(2.0) * a)(3)


def test_structures_keep_integer_leaves_as_constants():
    p = {"w": xp.asarray([1.0, 2.0]), "n": 3, "i": xp.arange(2)}
    g = ember.grad(lambda d: xp.sum(d["w"] * d["w"]) * d["n"])(p)
    np.testing.assert_array_equal(g["w"].raw, [6.0, 12.0])
    assert g["n"] == 3 and g["i"] is p["i"]
    with pytest.raises(ember.NotDifferentiableError, match="none floating"):
        ember.grad(lambda d: xp.asarray(1.0))({"i": xp.arange(2), "j": xp.arange(3)})


def test_integer_output_raises():
    with pytest.raises(ember.NotDifferentiableError, match="int64") as e:
        ember.grad(lambda x: xp.sum(xp.astype(x, xp.int64)))(xp.ones(2))
    assert INTEGER_OUTPUT_FIX in str(e.value)


def test_complex_output_raises_naming_real_abs_and_vjp():
    with pytest.raises(ember.NotDifferentiableError, match="complex128") as e:
        ember.grad(lambda x: xp.sum(x * 1j))(xp.ones(2))
    assert COMPLEX_OUTPUT_FIX in str(e.value)
    for fn in ("xp.real", "xp.abs", "ember.vjp"):
        assert fn in str(e.value)
    # what the message advises works
    g = ember.grad(lambda x: xp.real(xp.sum(x * (1 + 2j))))(xp.ones(2))
    np.testing.assert_array_equal(g.raw, [1.0, 1.0])


def test_repeated_argnums_each_get_the_full_gradient():
    x, y = xp.asarray([1.0, 2.0]), xp.asarray([3.0, 4.0])
    f = lambda a, b: xp.sum(a * a * b)  # noqa: E731
    gx = 2 * x.raw * y.raw
    g = ember.grad(f, argnums=(0, 0))(x, y)
    assert len(g) == 2
    for gi in g:
        np.testing.assert_array_equal(gi.raw, gx)
    assert g[0] is not g[1]  # two handles: consuming one leaves the other alive
    g = ember.grad(f, argnums=(1, -1, 0))(x, y)
    np.testing.assert_array_equal(g[0].raw, x.raw ** 2)
    np.testing.assert_array_equal(g[1].raw, x.raw ** 2)
    np.testing.assert_array_equal(g[2].raw, gx)


@pytest.mark.parametrize("argnums", ["a", 1.5, (0, "b"), (), True, None])
def test_malformed_argnums_is_a_clear_error_naming_grad(argnums):
    with pytest.raises(ember.NotDifferentiableError, match=r"^grad: argnums must be") as e:
        ember.grad(lambda x: xp.sum(x), argnums=argnums)
    assert _head(BAD_ARGNUMS) in str(e.value)
    with pytest.raises(ember.NotDifferentiableError, match=r"^value_and_grad: argnums"):
        ember.value_and_grad(lambda x: xp.sum(x), argnums=argnums)


def test_argnums_out_of_range_names_grad_and_the_count():
    with pytest.raises(ember.NotDifferentiableError, match="argnums includes 3 .* 1 positional"):
        ember.grad(lambda x: xp.sum(x), argnums=3)(xp.ones(2))


def test_message_template_is_used():
    with pytest.raises(ember.NotDifferentiableError) as e:
        ember.grad(lambda a: a)(xp.arange(2))
    assert _head(NOT_DIFFERENTIABLE_ARG) in str(e.value)
