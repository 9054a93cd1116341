"""A jitted training step on Dask builds one graph per call: the parameters' task graphs stay
the same size over 100 steps (each call persists its results), and the values are eager's."""

from __future__ import annotations

import numpy as np
import pytest

import ember

pytest.importorskip("dask")
import ember.autodiff.dask as dxp  # noqa: E402
import ember.autodiff.numpy as nxp  # noqa: E402

STEPS = 100


def _problem(xp, chunks=None):
    rng = np.random.default_rng(0)
    arrays = (rng.standard_normal((5, 3)), rng.standard_normal((16, 5)), rng.standard_normal((16, 3)))
    if chunks is None:
        return tuple(xp.asarray(a) for a in arrays)
    import dask.array as da

    return tuple(xp.asarray(da.from_array(a, chunks=(chunks, -1))) for a in arrays)


def _step(xp):
    def loss(w, x, y):
        r = xp.tanh(x @ w) - y
        return xp.mean(r * r)

    def step(w, x, y):
        value, g = ember.value_and_grad(loss)(w, x, y)
        return value, w - 0.1 * g

    return step


def _tasks(t) -> int:
    return len(ember.autodiff.raw_value(t).__dask_graph__())


@pytest.mark.parametrize("chunks", [None, 4])
def test_jitted_dask_step_keeps_its_graph_size_over_100_steps(chunks):
    step = ember.jit(_step(dxp))
    w, x, y = _problem(dxp, chunks)
    sizes = []
    for _ in range(STEPS):
        value, w = step(w, x, y)
        sizes.append(_tasks(w))
    assert step.trace_count == 1
    assert len(set(sizes)) == 1, sizes[:3] + sizes[-3:]  # the same task count at every step
    ref_step = _step(nxp)
    rw, rx, ry = _problem(nxp)
    for _ in range(STEPS):
        ref_value, rw = ref_step(rw, rx, ry)
    np.testing.assert_allclose(np.asarray(ember.compute(w).raw), rw.raw, rtol=1e-12, atol=1e-14)
    assert float(value) == pytest.approx(float(ref_value), rel=1e-12)


def test_without_persist_the_graph_grows():
    # what the persisting prevents (and what makes the test above able to fail)
    step = ember.jit(_step(dxp), persist=False)
    w, x, y = _problem(dxp)
    sizes = []
    for _ in range(5):
        _, w = step(w, x, y)
        sizes.append(_tasks(w))
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
