"""A shape error's fix fits the op: not "make the shapes broadcast-compatible" for every op.

Issue 40 found that advice on errors where it does not help (negative sizes,
empty reductions); the same held for permute_dims with a repeated axis,
matrix_transpose of a vector (a bare ValueError), squeeze of a non-1 axis, a
ragged nested list given to asarray and a write whose value does not fit
``x[key]``. Each message names the op, the shapes and a fix of its own,
eagerly and under grad, and is a ShapeError (a ValueError).
"""

from __future__ import annotations

import pytest

import ember

xp = ember.autodiff.namespace("numpy")
BROADCAST_ADVICE = "make the shapes broadcast-compatible"


def _setitem(x, key, v):
    x[key] = v
    return x


CASES = {
    "permute_dims": (lambda x: xp.permute_dims(x, (0, 0)), "permutation of range(x.ndim)"),
    "matrix_transpose": (lambda x: xp.matrix_transpose(x[0, :]), "at least 2 dimensions"),
    "squeeze": (lambda x: xp.squeeze(x, axis=0), "only axes of size 1"),
    "setitem": (lambda x: _setitem(x * 1.0, 0, xp.ones(4)), "broadcast to the shape of x[key]"),
}


@pytest.mark.parametrize("op", sorted(CASES))
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "grad"])
def test_each_op_names_its_own_fix(op, traced):
    fn, fix = CASES[op]
    x = xp.ones((2, 3))
    with pytest.raises(ember.ShapeError) as e:
        if traced:
            ember.grad(lambda t: xp.sum(fn(t)))(x)
        else:
            fn(x)
    msg = str(e.value)
    assert op in msg and ("(2, 3)" in msg or "(3,)" in msg), msg
    assert fix in msg and BROADCAST_ADVICE not in msg, msg


def test_ragged_nested_list():
    with pytest.raises(ember.ShapeError) as e:
        xp.asarray([[1.0], [1.0, 2.0]])
    msg = str(e.value)
    assert msg.startswith("asarray: ") and "rectangular" in msg and BROADCAST_ADVICE not in msg
