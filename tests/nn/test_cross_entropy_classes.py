"""cross_entropy with a class index out of range: an error, not a silently smaller loss.

An index outside ``[0, num_classes)`` gives an all-zero one-hot row, so the
sample added nothing to the loss or the gradient (``cross_entropy(ones((4,
3)), [0, 1, 5, 2])`` returned 0.824 without a word); PyTorch raises. Where the
test is cheap (eager host arrays: NumPy, array-api-strict) ember raises too.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn as nn

BACKENDS = ["numpy", "array_api_strict"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("labels", [[0, 1, 5, 2], [0, -1, 1, 2], [3, 3, 3, 3]], ids=["big", "negative", "all"])
def test_an_out_of_range_index_is_refused(backend, labels):
    xp = ember.autodiff.namespace(backend)
    logits = xp.ones((4, 3))
    t = xp.asarray(xp._backend.asarray(np.array(labels)))
    with pytest.raises(ValueError, match=r"cross_entropy: a class index is out of range.*3 classes.*"
                                         r"indices 0 to 2.*Fix: map the labels to 0\.\.2"):
        nn.cross_entropy(logits, t)
    with pytest.raises(ValueError, match="out of range"):  # under grad too
        ember.grad(lambda z: nn.cross_entropy(z, t))(logits)


def test_raw_numpy_arrays_and_other_axes():
    with pytest.raises(ValueError, match="out of range"):
        nn.cross_entropy(np.ones((2, 3, 5)), np.array([[0, 3, 1, 1, 2], [0, 0, 0, 0, 0]]), axis=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_valid_indices_and_empty_batches_still_work(backend):
    xp = ember.autodiff.namespace(backend)
    t = xp.asarray(xp._backend.asarray(np.array([0, 2, 1])))
    loss = nn.cross_entropy(xp.zeros((3, 3)), t)
    assert float(loss) == pytest.approx(np.log(3.0))
    empty = xp.asarray(xp._backend.asarray(np.zeros((0,), dtype=np.int64)))
    assert tuple(nn.cross_entropy(xp.zeros((0, 3)), empty, reduction="none").shape) == (0,)
