"""The gradient rule table (tests/test_grad_rules.py) run once under ember.jit: the value and
the VJP of every case, staged and replayed, equal the eager ones to 1e-12 (float64)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_TESTS, os.path.join(_TESTS, "autodiff")]  # the helpers and the rule table's module
import ember  # noqa: E402
from _gradcheck import BACKENDS, namespace, to_backend, to_numpy  # noqa: E402
from test_grad_rules import CASES  # noqa: E402


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("strat,fn,kw", CASES)
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_rule_under_jit_equals_eager(lib, strat, fn, kw, data):
    kw = dict(kw)
    if lib not in kw.pop("backends", BACKENDS):
        pytest.skip(f"not supported by {lib}")
    xp = namespace(lib)
    args = list(data.draw(strat, label="args"))
    argnums = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind in "fc"]
    t_args = [to_backend(xp, np.array(a)) if isinstance(a, np.ndarray) else a for a in args]
    if not argnums:
        pytest.skip("no differentiable argument")

    def pulled(*diff):
        def g_of(*d):
            full = list(t_args)
            for i, v in zip(argnums, d):
                full[i] = v
            return fn(xp, *full)

        out, vjp_fn = ember.vjp(g_of, *diff)
        return out, vjp_fn(ember.tree.map(xp.ones_like, out))

    diff = [t_args[i] for i in argnums]
    with np.errstate(all="ignore"):
        eager = pulled(*diff)
        staged = ember.jit(pulled)(*diff)
    le, ls = ember.tree.leaves(eager), ember.tree.leaves(staged)
    assert len(le) == len(ls)
    for a, b in zip(le, ls):
        np.testing.assert_allclose(to_numpy(b), to_numpy(a), rtol=1e-12, atol=1e-12, equal_nan=True)
