"""Helpers of the vmap tests: a batched call compared with a Python loop over the examples."""

from __future__ import annotations

import numpy as np
import pytest

import ember

BACKENDS = ("numpy", "array_api_strict")


def ns(name: str):
    """ember's wrapper namespace of backend ``name`` (skipped with the reason if absent)."""
    if name == "dask":
        pytest.importorskip("dask.array", reason="dask not installed")
    if name == "array_api_strict":
        pytest.importorskip("array_api_strict", reason="array_api_strict not installed")
    return ember.autodiff.namespace(name)


def to(xp, a, dtype=np.float64):
    """NumPy data as an untracked Tensor of ``xp``."""
    return xp.asarray(xp._backend.asarray(np.asarray(a, dtype=dtype)))


def as_numpy(t):
    """A NumPy array of a Tensor of any backend (lazy ones computed), or of a raw array."""
    if isinstance(t, ember.Tensor):
        t = ember.compute(t).raw
    return np.asarray(t)


def _slice(xp, a, axis, i):
    """Example ``i`` of Tensor ``a`` along ``axis`` (None: ``a`` itself)."""
    if axis is None or not isinstance(a, ember.Tensor):
        return a
    return to(xp, np.take(as_numpy(a), i, axis=axis), as_numpy(a).dtype)


def loop(xp, f, args, in_axes, out_axes=0):
    """``f`` called once per example (the arguments sliced along ``in_axes``, a tuple of one
    int or None per positional argument, no structures), the results stacked along
    ``out_axes`` (an int or None, applied to every array leaf of the result)."""
    n = next(as_numpy(a).shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    results = []
    for i in range(n):
        results.append(f(*[_slice(xp, a, ax, i) for a, ax in zip(args, in_axes)]))
    leaves = [ember.tree.flatten(r)[0] for r in results]
    treedef = ember.tree.flatten(results[0])[1]
    stacked = []
    for k in range(len(leaves[0])):
        if out_axes is None:
            stacked.append(as_numpy(leaves[0][k]))
        else:
            stacked.append(np.stack([as_numpy(lv[k]) for lv in leaves], axis=out_axes))
    return ember.tree.unflatten(treedef, stacked)


def assert_close(got, want, tol=1e-12):
    got_l, got_d = ember.tree.flatten(got)
    want_l, want_d = ember.tree.flatten(want)
    assert len(got_l) == len(want_l), (got_d, want_d)
    for g, w in zip(got_l, want_l):
        g = as_numpy(g)
        w = np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def check(xp, f, *args, in_axes=0, out_axes=0, tol=1e-12):
    """``vmap(f)`` equals the loop over the examples (in_axes: an int, None or a flat tuple)."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    got = ember.vmap(f, in_axes=in_axes, out_axes=out_axes)(*args)
    want = loop(xp, f, args, axes, out_axes)
    assert_close(got, want, tol)
    return got
