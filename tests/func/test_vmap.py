"""ember.vmap: every family of batching rules against a Python loop over the examples.

Shapes come from hypothesis (0-d examples included), values are float64, and
each batched result must equal stacking the unbatched function's results to
1e-12, on NumPy and array-api-strict (Dask for a smoke test).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from _vmap_check import BACKENDS, as_numpy, assert_close, check, loop, ns, to

FAST = settings(max_examples=12, deadline=None)

shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)
batch = st.integers(1, 3)


def rand(xp, shape, seed=0, dtype=np.float64):
    return to(xp, np.random.default_rng(seed).standard_normal(shape), dtype)


@pytest.fixture(params=BACKENDS, scope="module")
def xp(request):
    return ns(request.param)


# ---------------------------------------------------------------------- elementwise
UNARY = ["sin", "exp", "tanh", "abs", "square", "negative", "log1p", "sign", "floor"]


@pytest.mark.parametrize("name", UNARY)
@FAST
@given(shape=shapes, n=batch)
def test_unary(xp, name, shape, n):
    x = rand(xp, (n, *shape))
    if name == "log1p":
        x = xp.abs(x)
    check(xp, getattr(xp, name), x)


@FAST
@given(shape=shapes, n=batch, drop=st.integers(0, 3), ones=st.integers(0, 7))
def test_binary_broadcasting(xp, shape, n, drop, ones):
    """Batched and unbatched operands of different ranks, with size-1 axes to broadcast."""
    other = tuple(1 if ones >> i & 1 else s for i, s in enumerate(shape))[drop:]
    x, y = rand(xp, (n, *shape)), rand(xp, (n, *other), 1)
    check(xp, lambda a, b: a * b + xp.maximum(a, b), x, y)
    check(xp, lambda a, b: a - b, x, y)  # y (n, *other): batched of lower rank
    check(xp, lambda a, b: xp.atan2(a, b), x, rand(xp, other, 2), in_axes=(0, None))
    check(xp, lambda a, b: a / (b * b + 1.0), rand(xp, other, 3), y, in_axes=(None, 0))


@FAST
@given(shape=shapes, n=batch)
def test_scalars_where_clip(xp, shape, n):
    x, y = rand(xp, (n, *shape)), rand(xp, (n, *shape), 1)
    check(xp, lambda a: 2.0 * a - 1.0, x)
    check(xp, lambda a, b: xp.where(a > b, a, b), x, y)
    check(xp, lambda a, b: xp.where(a > 0.0, a, b), x, rand(xp, shape, 2), in_axes=(0, None))
    check(xp, lambda a: xp.clip(a, min=-0.5, max=0.5), x)
    check(xp, lambda a: xp.zeros_like(a) + xp.ones_like(a) * a, x)
    check(xp, lambda a: xp.astype(a > 0, xp.float64), x)
    check(xp, lambda a: ember.nn.relu(a), x)
    check(xp, lambda a: ember.nn.gelu(a), x)
    check(xp, lambda a: ember.nn.erf(a), x)


# ---------------------------------------------------------------------- reductions
REDUCTIONS = ["sum", "mean", "max", "min", "prod", "std", "var"]


@pytest.mark.parametrize("name", REDUCTIONS)
@FAST
@given(shape=shapes, n=batch, data=st.data())
def test_reductions(xp, name, shape, n, data):
    x = rand(xp, (n, *shape))
    f = getattr(xp, name)
    check(xp, lambda a: f(a), x)
    check(xp, lambda a: f(a, keepdims=True), x)
    if shape:
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        check(xp, lambda a: f(a, axis=axis), x)
        check(xp, lambda a: f(a, axis=(axis,), keepdims=True), x)


@FAST
@given(shape=shapes.filter(bool), n=batch, data=st.data())
def test_arg_sort_cumulative(xp, shape, n, data):
    x = rand(xp, (n, *shape))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    check(xp, lambda a: xp.argmax(a), x)
    check(xp, lambda a: xp.argmin(a, axis=axis, keepdims=True), x)
    check(xp, lambda a: xp.argmax(a, keepdims=True), x)
    check(xp, lambda a: xp.sort(a, axis=axis), x)
    check(xp, lambda a: xp.argsort(a, axis=axis, descending=True), x)
    check(xp, lambda a: xp.cumulative_sum(a, axis=axis), x)
    check(xp, lambda a: xp.any(a > 0.0, axis=axis), x)
    check(xp, lambda a: xp.count_nonzero(a > 0.0), x)
    if len(shape) == 1:
        check(xp, lambda a: xp.cumulative_prod(a), x)


# ---------------------------------------------------------------------- linear algebra
@FAST
@given(n=batch, m=st.integers(1, 3), k=st.integers(1, 3), p=st.integers(1, 3),
       stack=st.lists(st.integers(1, 2), max_size=2).map(tuple))
def test_matmul_family(xp, n, m, k, p, stack):
    A, B_, v, w = rand(xp, (n, *stack, m, k)), rand(xp, (n, k, p), 1), rand(xp, (n, k), 2), rand(xp, (n, k), 3)
    mm = lambda a, b: a @ b  # noqa: E731
    check(xp, mm, A, B_)
    check(xp, mm, A, rand(xp, (k, p), 4), in_axes=(0, None))
    check(xp, mm, rand(xp, (*stack, m, k), 5), B_, in_axes=(None, 0))
    check(xp, mm, A, w)  # a vector on the right
    check(xp, mm, v, B_)  # on the left
    check(xp, mm, v, w)  # both: a 0-d result per example
    check(xp, mm, v, rand(xp, (k, p), 6), in_axes=(0, None))
    check(xp, mm, rand(xp, (m, k), 7), w, in_axes=(None, 0))
    check(xp, lambda a, b: xp.vecdot(a, b), v, w)
    check(xp, lambda a, b: xp.vecdot(a, b), v, rand(xp, (k,), 8), in_axes=(0, None))
    check(xp, lambda a, b: xp.vecdot(a, b, axis=-2), A, rand(xp, (m, k), 8), in_axes=(0, None))
    check(xp, lambda a, b: xp.tensordot(a, b, axes=1), A, B_)
    check(xp, lambda a, b: xp.tensordot(a, b, axes=1), A, rand(xp, (k, p), 9), in_axes=(0, None))
    check(xp, lambda a, b: xp.tensordot(a, b, axes=1), rand(xp, (m, k), 9), B_, in_axes=(None, 0))
    check(xp, lambda a, b: xp.tensordot(a, b, axes=([0], [0])), v, w)
    check(xp, lambda a, b: xp.linalg.outer(a, b), v, rand(xp, (p,), 10), in_axes=(0, None))
    check(xp, lambda a, b: xp.linalg.outer(a, b), v, w)
    check(xp, lambda a: xp.matrix_transpose(a), A)
    u, u2 = rand(xp, (n, 3), 11), rand(xp, (n, 2, 3), 12)
    check(xp, lambda a, b: xp.linalg.cross(a, b), u, u2)  # ranks broadcast
    check(xp, lambda a, b: xp.linalg.cross(a, b), u2, rand(xp, (3,), 13), in_axes=(0, None))


@FAST
@given(n=batch, m=st.integers(1, 3))
def test_linalg_stacks(xp, n, m):
    a = rand(xp, (n, m, m))
    spd = a @ xp.matrix_transpose(a) + 3.0 * xp.eye(m)
    b = rand(xp, (n, m), 1)
    check(xp, lambda s: xp.linalg.inv(s), spd, tol=1e-10)
    check(xp, lambda s: xp.linalg.det(s), spd, tol=1e-10)
    check(xp, lambda s: xp.linalg.cholesky(s), spd, tol=1e-10)
    check(xp, lambda s: xp.linalg.eigvalsh(s), spd, tol=1e-10)
    check(xp, lambda s: xp.linalg.svdvals(s), a, tol=1e-10)
    check(xp, lambda s: xp.linalg.trace(s), a)
    check(xp, lambda s: xp.linalg.diagonal(s), a)
    check(xp, lambda s: xp.linalg.matrix_norm(s), a, tol=1e-10)
    check(xp, lambda s: xp.linalg.vector_norm(s), a, tol=1e-10)
    check(xp, lambda s: xp.linalg.vector_norm(s, axis=-1), a, tol=1e-10)
    check(xp, lambda s, r: xp.linalg.solve(s, r), spd, b, tol=1e-10)
    check(xp, lambda s, r: xp.linalg.solve(s, r), spd, rand(xp, (m,), 2), in_axes=(0, None), tol=1e-10)
    check(xp, lambda s, r: xp.linalg.solve(s, r), spd[0, ...], b, in_axes=(None, 0), tol=1e-10)
    check(xp, lambda s: xp.tril(s) + xp.triu(s, k=1), a)


@FAST
@given(shape=shapes.filter(bool), n=batch)
def test_fft(xp, shape, n):
    x = rand(xp, (n, *shape))
    c = lambda a: xp.astype(a, xp.complex128)  # noqa: E731  (strict: fft takes complex input)
    check(xp, lambda a: xp.real(xp.fft.fft(c(a))), x)
    check(xp, lambda a: xp.imag(xp.fft.rfft(a, axis=0)), x)
    check(xp, lambda a: xp.real(xp.fft.fftn(c(a))), x, tol=1e-10)
    check(xp, lambda a: xp.fft.fftshift(a), x)


# ---------------------------------------------------------------------- shape ops
@FAST
@given(shape=shapes, n=batch, data=st.data())
def test_shape_ops(xp, shape, n, data):
    x = rand(xp, (n, *shape))
    nd = len(shape)
    size = int(np.prod(shape))
    check(xp, lambda a: xp.reshape(a, (-1,)), x)
    check(xp, lambda a: xp.reshape(a, (size, 1)), x)
    perm = tuple(data.draw(st.permutations(range(nd))))
    check(xp, lambda a: xp.permute_dims(a, perm), x)
    ax = data.draw(st.integers(-nd - 1, nd))
    check(xp, lambda a: xp.expand_dims(a, axis=ax), x)
    check(xp, lambda a: xp.squeeze(xp.expand_dims(a, axis=0), axis=0), x)
    check(xp, lambda a: xp.broadcast_to(a, (2, *shape)), x)
    check(xp, lambda a: xp.flip(a), x)
    check(xp, lambda a: xp.roll(a, 1), x)
    check(xp, lambda a: xp.tile(a, (2,)), x)
    check(xp, lambda a, b: xp.stack([a, b], axis=-1), x, rand(xp, shape, 1), in_axes=(0, None))
    if nd:
        axis = data.draw(st.integers(-nd, nd - 1))
        check(xp, lambda a: xp.concat([a, a * 2.0], axis=axis), x)
        check(xp, lambda a, b: xp.concat([a, b], axis=axis), x, rand(xp, shape, 1), in_axes=(0, None))
        check(xp, lambda a: xp.concat([a, a]), x)
        check(xp, lambda a: xp.flip(a, axis=axis), x)
        check(xp, lambda a: xp.roll(a, -1, axis=axis), x)
        check(xp, lambda a: xp.moveaxis(a, 0, -1), x)
        check(xp, lambda a: xp.repeat(a, 2, axis=axis), x)
        check(xp, lambda a: xp.repeat(a, 2), x)
        check(xp, lambda a: xp.diff(a, axis=axis), x)
        check(xp, lambda a: xp.stack(xp.unstack(a, axis=axis)), x)


# ---------------------------------------------------------------------- indexing
@FAST
@given(n=batch, m=st.integers(2, 4), k=st.integers(1, 3))
def test_getitem(xp, n, m, k):
    x = rand(xp, (n, m, k))
    check(xp, lambda a: a[0, ...], x)
    check(xp, lambda a: a[1:, ...], x)
    check(xp, lambda a: a[..., -1], x)
    check(xp, lambda a: a[None, ::2, 0], x)
    check(xp, lambda a: a[-1, -1], x)
    idx = xp.asarray(xp._backend.asarray(np.array([m - 1, 0, 1], dtype=np.int64)))
    check(xp, lambda a: xp.take(a, idx, axis=0), x)
    mask = to(xp, np.arange(m) % 2 == 0, bool)
    for f in (lambda a: a[idx, ...], lambda a: a[mask, ...], lambda a: a[:, idx[:1]],
              lambda a: a[idx, idx[:1] * 0]):
        try:
            f(x[0, ...])
        except IndexError:  # array-api-strict refuses some index arrays even unbatched
            continue
        check(xp, f, x)


@FAST
@given(n=batch, m=st.integers(2, 4), k=st.integers(1, 3))
def test_take_batched_indices(xp, n, m, k):
    x = rand(xp, (n, m, k))
    rng = np.random.default_rng(n * m)
    idx = to(xp, rng.integers(0, m, (n, 3)), np.int64)
    check(xp, lambda a, i: xp.take(a, i, axis=0), x, idx)
    check(xp, lambda a, i: xp.take(a, i, axis=0), x[0, ...], idx, in_axes=(None, 0))
    along = to(xp, rng.integers(0, k, (n, m, 2)), np.int64)
    check(xp, lambda a, i: xp.take_along_axis(a, i, axis=-1), x, along)
    check(xp, lambda a, i: xp.take_along_axis(a, i, axis=1), x[0, ...], along, in_axes=(None, 0))


@FAST
@given(n=batch, m=st.integers(2, 4), k=st.integers(1, 3))
def test_setitem(xp, n, m, k):
    x, v = rand(xp, (n, m, k)), rand(xp, (n, k), 1)

    def write(a, b):
        a = a * 1.0
        a[0, ...] = b
        a[-1, :] = 2.0
        return a

    check(xp, write, x, v)
    check(xp, write, x, v[0, ...], in_axes=(0, None))

    def into_local(b):  # an unbatched local array becomes batched when written into
        a = xp.zeros((m, k), dtype=xp.float64)
        a[1, ...] = b
        a += b
        return a

    check(xp, into_local, v)


# ---------------------------------------------------------------------- nn's fused ops
@FAST
@given(n=batch, rows=st.lists(st.integers(1, 3), max_size=2).map(tuple), c=st.integers(2, 4))
def test_nn_fused(xp, n, rows, c):
    z = rand(xp, (n, *rows, c))
    t = to(xp, np.eye(c)[np.random.default_rng(1).integers(0, c, (n, *rows))])
    w, b = rand(xp, (3, c), 2), rand(xp, (3,), 3)
    nn = ember.nn
    check(xp, lambda a: nn.softmax(a), z)
    check(xp, lambda a: nn.log_softmax(a, axis=0) if a.ndim else a, z)
    for red in ("mean", "sum", "none"):
        check(xp, lambda a, y: nn.cross_entropy(a, y, reduction=red), z, t)
    check(xp, lambda a, y: nn.cross_entropy(a, y), z, t[0, ...], in_axes=(0, None))
    check(xp, lambda a: nn.linear(a, w, b), z)
    check(xp, lambda a, w_: nn.linear(a, w_, b), z, rand(xp, (n, 3, c), 4), in_axes=(0, 0))
    ln = nn.LayerNorm.init((c,), xp=xp, dtype=xp.float64)
    check(xp, lambda a: ln(a), z, tol=1e-10)
    check(xp, ember.grad(lambda m, a: xp.sum(m(a) ** 3)), ln, z, in_axes=(None, 0), tol=1e-10)


def test_conv_and_pooling(xp):
    """Per-example images through a conv layer, ReLU and pooling, and their gradients."""
    conv = ember.nn.Conv2d.init(ember.random.key(0), 2, 3, 3, xp=xp, dtype=xp.float64)
    x = rand(xp, (3, 2, 6, 6))
    f = lambda a: ember.nn.max_pool(ember.nn.relu(conv(a)), 2)  # noqa: E731
    check(xp, f, x, tol=1e-10)
    check(xp, lambda a: ember.nn.avg_pool(a, 2), x, tol=1e-10)
    loss = lambda m, a: xp.sum(ember.nn.max_pool(ember.nn.relu(m(a)), 2) ** 2)  # noqa: E731
    check(xp, ember.grad(loss), conv, x, in_axes=(None, 0), tol=1e-10)


def test_full_with_a_batched_fill(xp):
    f = lambda a: xp.full((2, 3), a, dtype=xp.float64)  # noqa: E731
    try:
        f(xp.asarray(1.0))
    except TypeError:  # array-api-strict takes Python scalars only, even unbatched
        return
    check(xp, f, rand(xp, (4,)))


# ---------------------------------------------------------------------- axes and structures
def test_in_axes_other_than_zero(xp):
    x = rand(xp, (3, 4, 2))
    f = lambda a: xp.sum(a * a, axis=-1)  # noqa: E731
    for ax in (1, -1, 2, -3):
        got = ember.vmap(f, in_axes=ax)(x)
        want = loop(xp, f, (x,), (ax,))
        assert_close(got, want)


def test_out_axes(xp):
    x = rand(xp, (3, 4, 2))
    f = lambda a: a * 2.0  # noqa: E731
    for ax in (1, -1, 2):
        got = ember.vmap(f, out_axes=ax)(x)
        assert_close(got, np.moveaxis(as_numpy(x) * 2.0, 0, ax))
    # out_axes None: an output the same for every example
    y = rand(xp, (4,))
    out = ember.vmap(lambda a, b: (a + b, b * 3.0), in_axes=(0, None), out_axes=(0, None))(x[:, :, 0], y)
    assert_close(out[1], as_numpy(y) * 3.0)
    # an unbatched output with out_axes 0 is broadcast
    got = ember.vmap(lambda a, b: b, in_axes=(0, None))(x, y)
    assert_close(got, np.broadcast_to(as_numpy(y), (3, 4)))


def test_structures(xp):
    """in_axes as a prefix of the arguments' structures; dict, list and tuple results."""
    params = {"w": rand(xp, (4, 2)), "b": rand(xp, (2,), 1)}
    xs = [rand(xp, (3, 4), 2), rand(xp, (4, 3), 3)]

    def f(p, pair):
        x, z = pair
        return {"y": x @ p["w"] + p["b"], "s": [xp.sum(z)]}

    got = ember.vmap(f, in_axes=(None, [0, 1]))(params, xs)
    for i in range(3):
        want = f(params, [xs[0][i, ...], xs[1][:, i]])
        assert_close(got["y"][i, ...], as_numpy(want["y"]))
        assert_close(got["s"][0][i, ...], as_numpy(want["s"][0]))
    got = ember.vmap(f, in_axes=({"w": None, "b": 0}, (0, 1)))(
        {"w": params["w"], "b": rand(xp, (3, 2), 4)}, (xs[0], xs[1]))
    assert got["y"].shape == (3, 2)
    got = ember.vmap(f, in_axes=(None, [0, 1]), out_axes={"y": 1, "s": [0]})(params, xs)
    assert got["y"].shape == (2, 3) and got["s"][0].shape == (3,)


def test_a_module_as_an_in_axes_prefix(xp):
    """A dataclass module whose fields are axes maps some parameters (an ensemble of weights
    sharing one bias) and leaves the others; its gradient equals a loop of grad calls."""
    nn = ember.nn
    ws, b = rand(xp, (3, 2, 4)), rand(xp, (2,), 1)  # three weights (out 2, in 4), one bias
    x = rand(xp, (5, 4), 2)
    ensemble = nn.Linear(ws, b)

    def loss(m, x):
        return xp.sum(m(x) ** 2)

    spec = (nn.Linear(0, None), None)
    got = ember.vmap(ember.grad(loss), in_axes=spec)(ensemble, x)
    for i in range(3):
        want = ember.grad(loss)(nn.Linear(ws[i, ...], b), x)
        assert_close(got.weight[i, ...], as_numpy(want.weight))
        assert_close(got.bias[i, ...], as_numpy(want.bias))
    with pytest.raises(ValueError, match=r"in_axes Linear.*a Linear against a dict"):
        ember.vmap(loss, in_axes=spec)({"weight": ws, "bias": b}, x)


def test_kwargs_and_raw_arrays():
    x = np.arange(6.0).reshape(3, 2)
    out = ember.vmap(lambda a, scale=None: a * scale)(x, scale=np.ones((3, 2)) * 2.0)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x * 2.0)


def test_dask_smoke():
    xp = ns("dask")
    x = rand(xp, (3, 4))
    check(xp, lambda a: xp.sum(xp.sin(a) * a, axis=0), x)
    check(xp, lambda a, b: a @ b, x, rand(xp, (4, 2), 1), in_axes=(0, None))
