"""asarray never makes an object array: a sparse matrix or an object array is an error.

A SciPy sparse matrix given to ``xp.asarray`` became a 0-d array of dtype
object holding it, with no error (issue 39); whatever came next failed far
away or, worse, "worked". ember arrays hold numbers: asarray raises a
DTypeError (a TypeError) naming the fix, on every backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.autodiff._wrappers import ASARRAY_OBJECT, ASARRAY_SPARSE

BACKENDS = ("numpy", "array_api_strict", "dask")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_matrix_names_toarray(backend):
    sp = pytest.importorskip("scipy.sparse", reason="the case needs SciPy's sparse matrices")
    xp = ember.autodiff.namespace(backend)
    m = sp.csr_matrix(np.eye(3))
    with pytest.raises(ember.DTypeError, match=r"toarray\(\)") as e:
        xp.asarray(m)
    assert isinstance(e.value, TypeError)
    assert str(e.value) == ASARRAY_SPARSE.format(kind="scipy.csr_matrix", shape=(3, 3))
    np.testing.assert_array_equal(np.asarray(ember.compute(xp.asarray(m.toarray())).raw), np.eye(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_array_is_refused(backend):
    xp = ember.autodiff.namespace(backend)
    with pytest.raises(ember.DTypeError) as e:
        xp.asarray(np.array([None, 1.0], dtype=object))
    assert str(e.value) == ASARRAY_OBJECT.format(kind="a numpy.ndarray")


def test_arbitrary_python_object_is_refused():
    xp = ember.autodiff.namespace("numpy")
    with pytest.raises(ember.DTypeError, match="dtype object"):
        xp.asarray(object())
