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


def test_jitted_adam_train_step_traces_twice_and_keeps_its_graph_size():
    # the optimizer's step counters are traced numbers: no new graph per step, and each call
    # still persists its results
    def loss(w, x, y):
        r = dxp.tanh(x @ w) - y
        return dxp.mean(r * r)

    opt = ember.optim.Adam(0.05)
    step = ember.jit(ember.training.train_step(loss, opt))
    w, x, y = _problem(dxp, 4)
    state = opt.init(w)
    sizes = []
    for _ in range(30):
        value, w, state = step(w, state, x, y)
        sizes.append(_tasks(w))
    assert step.trace_count == 2 and state["step"] == 30
    assert len(set(sizes[1:])) == 1, sizes[:3] + sizes[-3:]
    rw, rx, ry = _problem(nxp)
    rstate = opt.init(rw)
    ref = ember.training.train_step(lambda w, x, y: nxp.mean((nxp.tanh(x @ w) - y) ** 2), opt)
    for _ in range(30):
        ref_value, rw, rstate = ref(rw, rstate, rx, ry)
    np.testing.assert_allclose(np.asarray(ember.compute(w).raw), rw.raw, rtol=1e-10, atol=1e-12)
