"""jit's matmul-update pass: ``w - s * (a @ b)`` on a dying weight runs as one BLAS gemm
into the weight's buffer, equal to eager to rounding; where its conditions fail the graph
keeps its ops; the kernel's fallback is eager's calls, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ember
import ember.backend as eb
from ember.func._jit_gemm import gemm_kernel

xp = ember.autodiff.namespace("numpy")
GEMM = eb.gemm(eb.get("numpy"))
needs_gemm = pytest.mark.skipif(GEMM is None, reason="threadpoolctl is not installed (pip install ember[fuse])")
SETTINGS = dict(deadline=None, max_examples=30, suppress_health_check=list(HealthCheck))
M, N, K = 256, 128, 16  # (M * N: at least the gemm's min_elements)

#: update forms: f(w, a, g, lr) -> the new weight; a (K, N), g (K, M)
FORMS = {
    "w - lr * (g.T @ a)": lambda w, a, g, lr: w - lr * (g.T @ a),
    "w - lr * (a.T @ g).T": lambda w, a, g, lr: w - lr * (a.T @ g).T,
    "w - (a.T @ g).mT * lr": lambda w, a, g, lr: w - xp.matrix_transpose(a.T @ g) * lr,
    "w + lr * (g.T @ a)": lambda w, a, g, lr: w + lr * (g.T @ a),
    "(g.T @ a) * lr + w": lambda w, a, g, lr: (g.T @ a) * lr + w,
    "w - g.T @ a": lambda w, a, g, lr: w - g.T @ a,
}


def _problem(dtype, order="C", seed=0):
    rng = np.random.default_rng(seed)
    w = np.asarray(rng.standard_normal((M, N)), dtype=dtype, order=order)
    return w, xp.asarray(rng.standard_normal((K, N)).astype(dtype)), xp.asarray(rng.standard_normal((K, M)).astype(dtype))


def _fresh(w):
    return xp.asarray(w) * 1.0  # (ember's own buffer, in w's layout: nobody else holds it)


def _address(t) -> int:
    return t.raw.__array_interface__["data"][0]


@needs_gemm
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_update_of_a_donated_weight_is_one_gemm_into_its_buffer(form, dtype, order):
    w0, a, g = _problem(dtype, order)
    f = ember.jit(lambda w, a, g: FORMS[form](w, a, g, 0.01), donate=0)
    listing = str(f.lower(_fresh(w0), a, g))
    assert "_gemm(" in listing and "[in place of v0]" in listing and "matmul" not in listing
    want = FORMS[form](xp.asarray(w0), a, g, 0.01)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for _ in range(3):  # (the call that traces, then replays)
        w = _fresh(w0)
        at = _address(w)
        out = f(w, a, g)
        assert _address(out) == at and out.raw.flags[f"{order}_CONTIGUOUS"]
        np.testing.assert_allclose(out.raw, want.raw, rtol=tol, atol=tol)
        with pytest.raises(ember.ConsumedError):
            w + 1.0


@needs_gemm
def test_a_traced_learning_rate_scales_the_gemm():
    w0, a, g = _problem("float64")
    f = ember.jit(lambda w, a, g, lr: w - lr * (g.T @ a), donate=0)
    for lr in (0.1, 0.2, 0.3):  # (the number is traced from its second value on)
        out = f(_fresh(w0), a, g, lr)
        np.testing.assert_allclose(out.raw, w0 - lr * (g.raw.T @ a.raw), rtol=1e-12, atol=1e-12)
    assert f.trace_count == 2 and "_gemm(" in str(f.lower(_fresh(w0), a, g, 0.4))


@needs_gemm
def test_a_weight_someone_else_holds_is_copied_not_written():
    w0, a, g = _problem("float64")
    f = ember.jit(lambda w, a, g: w - 0.5 * (g.T @ a), donate=0)
    for _ in range(3):
        w = _fresh(w0)
        keep = w.share()
        out = f(w, a, g)
        np.testing.assert_array_equal(keep.raw, w0)
        np.testing.assert_allclose(out.raw, w0 - 0.5 * (g.raw.T @ a.raw), rtol=1e-12, atol=1e-12)


@needs_gemm
def test_a_fresh_intermediate_dying_in_the_update_receives_it():
    w0, a, g = _problem("float64")
    f = ember.jit(lambda w, a, g: (w * 0.9) - 0.5 * (g.T @ a))
    assert "_gemm(" in str(f.lower(xp.asarray(w0), a, g))
    w = xp.asarray(w0)
    np.testing.assert_allclose(f(w, a, g).raw, w0 * 0.9 - 0.5 * (g.raw.T @ a.raw), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(w.raw, w0)  # (not donated: never written)


NOT_FUSED = {
    # the weight is read after the update
    "read after": (lambda w, a, g: (w - 0.5 * (g.T @ a), xp.sum(w)), 0),
    # the product is an output too
    "product kept": (lambda w, a, g: (w - 0.5 * (p := g.T @ a), p), 0),
    # the product reads the weight: BLAS may not write where it reads
    "weight in the product": (lambda w, a, g: w - 0.5 * (w @ (a.T @ a)), 0),
    # not donated: the caller's buffer
    "not donated": (lambda w, a, g: w - 0.5 * (g.T @ a), ()),
    # a product that broadcasts into the weight
    "broadcast": (lambda w, a, g: w - 0.5 * (g[:1].T @ a[:1])[:1], 0),
}


@needs_gemm
@pytest.mark.parametrize("case", sorted(NOT_FUSED))
def test_where_the_conditions_fail_the_graph_keeps_its_ops(case):
    fn, donate = NOT_FUSED[case]
    w0, a, g = _problem("float64")
    f = ember.jit(fn, donate=donate)
    assert "_gemm(" not in str(f.lower(_fresh(w0), a, g))
    want = fn(xp.asarray(w0), a, g)
    for _ in range(2):
        w = _fresh(w0)
        got = f(w, a, g)
        for x, y in zip(ember.tree.leaves(got), ember.tree.leaves(want)):
            np.testing.assert_array_equal(x.raw, y.raw)  # (the same calls: bit for bit)


def test_without_fuse_or_below_the_size_limit_the_ops_stay():
    w0, a, g = _problem("float64")
    f = ember.jit(lambda w, a, g: w - 0.5 * (g.T @ a), donate=0, fuse=False)
    assert "_gemm(" not in str(f.lower(_fresh(w0), a, g))
    small = ember.jit(lambda w, a, g: w - 0.5 * (g.T @ a), donate=0)
    assert "_gemm(" not in str(small.lower(_fresh(w0[:8, :8]), a[:, :8], g[:, :8]))
    deep = GEMM.max_inner + 1 if GEMM is not None else 300  # (a long inner dimension)
    assert "_gemm(" not in str(small.lower(_fresh(w0), xp.ones((deep, N)), xp.ones((deep, M))))
    raw = ember.jit(lambda w, a, g: w - 0.5 * (g.T @ a), donate=0)  # (raw arrays: never written)
    w = np.array(w0)
    np.testing.assert_allclose(raw(w, a.raw, g.raw), w0 - 0.5 * (g.raw.T @ a.raw), rtol=1e-12)
    np.testing.assert_array_equal(w, w0)


@settings(**SETTINGS)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 5), st.booleans(), st.sampled_from([-1, 1]),
       st.sampled_from([None, 0.5, -2.0]), st.sampled_from(["C", "F", "strided"]), st.booleans(),
       st.integers(0, 2**32 - 1))
@example(1, 1, 3, False, -1, None, "strided", True, 1)  # (a strided 1 x 1 view: contiguous to NumPy)
def test_the_kernel_equals_eager_and_its_fallback_is_eager_bit_for_bit(m, n, k, transposed, sign, scale,
                                                                      layout, into, seed):
    d = xp._dispatch
    rng = np.random.default_rng(seed)
    shape = (n, m) if transposed else (m, n)
    c0 = rng.standard_normal((shape[0] * 2, shape[1] * 2))
    c = c0[::2, ::2] if layout == "strided" else np.asarray(c0[: shape[0], : shape[1]], order=layout)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    p = a @ b
    p = p.T if transposed else p
    p = p if scale is None else p * scale
    want = c - p if sign < 0 else c + p
    before = c.copy()
    out = gemm_kernel(d)(c, a, b, scale, sign=sign, transposed=transposed, out=c if into else None)
    if into:
        assert out is c
    else:
        np.testing.assert_array_equal(c, before)  # (not planned into c: c stays)
    # BLAS writes into c where NumPy flags it contiguous (a copy is; so is a strided view of
    # one row or column), else the ufuncs run
    blas = GEMM is not None and k > 0 and (not into or c.flags.c_contiguous or c.flags.f_contiguous)
    if blas:
        np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13 * (1 + k))
    else:  # (the ufuncs eager calls, in eager's order)
        np.testing.assert_array_equal(out, want)


@needs_gemm
def test_the_gemm_runs_where_the_product_was_unless_the_weight_is_read_in_between():
    w0, a, g = _problem("float64")
    h = xp.ones(3)

    def listed(fn):
        lines = str(ember.jit(fn, donate=0).lower(_fresh(w0), a, g, h)).splitlines()
        return [next(i for i, line in enumerate(lines) if name in line) for name in ("_gemm(", "exp(", "sum(")
                if any(name in line for line in lines)]

    def early(w, a, g, h):  # (the product's operands then die where they did)
        p = g.T @ a
        return w - 0.5 * p, xp.exp(h)

    def late(w, a, g, h):  # (w read after the product: the gemm waits for that read)
        p = g.T @ a
        s = xp.sum(w)
        return w - 0.5 * p, s * xp.exp(h)

    gemm_at, exp_at = listed(early)
    assert gemm_at < exp_at
    gemm_at, exp_at, sum_at = listed(late)
    assert gemm_at > sum_at
    for fn in (early, late):
        got, want = ember.jit(fn, donate=0)(_fresh(w0), a, g, h), fn(xp.asarray(w0), a, g, h)
        for x, y in zip(got, want):
            np.testing.assert_allclose(x.raw, y.raw, rtol=1e-12, atol=1e-12)


def test_an_update_of_an_array_made_after_the_product_waits_for_it():
    # w made after the product (a momentum buffer, a decayed weight): the gemm cannot run
    # where the product was
    w0, a, g = _problem("float64")

    def f(w, a, g):
        p = g.T @ a
        v = w * 0.9
        return v - 0.1 * p

    want = f(xp.asarray(w0), a, g)
    for _ in range(3):
        np.testing.assert_allclose(ember.jit(f)(xp.asarray(w0), a, g).raw, want.raw, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("opt", ["momentum", "nesterov-decay"])
def test_jitted_sgd_with_momentum_or_weight_decay_equals_eager(opt):
    kw = {"momentum": 0.9} if opt == "momentum" else {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-2}
    sgd = ember.optim.SGD(0.05, **kw)
    step = ember.training.train_step(lambda p, x: xp.sum((x @ p["w"]) ** 2), sgd)
    jstep = ember.jit(step)
    x = xp.asarray(np.linspace(-0.01, 0.01, 64 * 256).reshape(64, 256))
    p = q = {"w": xp.asarray(np.linspace(-1.0, 1.0, M * N).reshape(M, N))}
    s = t = sgd.init(p)
    for _ in range(4):  # (the step counter is traced from the second call on)
        lp, p, s = step(p, s, x)
        lq, q, t = jstep(q, t, x)
        np.testing.assert_allclose(q["w"].raw, p["w"].raw, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(float(lq), float(lp), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_zero_scale_keeps_the_nan_of_zero_times_a_non_finite_product(bad, dtype):
    # BLAS skips the product when alpha is 0; eager's 0 * inf and 0 * nan are NaN
    w0 = _problem(dtype)[0]
    a = xp.ones((64, N), dtype=getattr(xp, dtype))  # (64 deep: OpenBLAS's small-matrix path multiplies)
    g = xp.asarray(np.full((M, 64), bad, dtype=dtype))
    f = ember.jit(lambda w, a, g, lr: w - lr * (g @ a), donate=0)
    for lr in (0.1, 0.2, 0.0, 0.0):
        got = f(_fresh(w0), a, g, lr).raw
        want = w0 - np.asarray(lr, dtype) * (g.raw @ a.raw)
        assert np.isnan(want).all() or lr != 0.0  # (what the case is about)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
