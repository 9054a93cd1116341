"""Every transform frees its tape by reference counting, without a GC pass.

Why: a tape is made of cycles (trace -> nodes -> trace, node -> result
handle), so one that waits for the cyclic collector holds its saved arrays
until the next full pass (which ember defers while tapes are recorded), and
the ownership layer keeps scanning it before every in-place write. A VJP
function retains its tape on purpose, until the function itself is dropped;
a transform that fails (or whose value does not depend on its inputs, so no
backward pass runs) frees the tape it recorded before returning or raising.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import ember
import ember.autodiff.numpy as xp
from ember.autodiff._trace import live_traces


def f(x):
    return xp.sum(xp.sin(x) * x + xp.exp(x) / 3.0)


def vec(x):
    return xp.tanh(x) * x


X = np.linspace(-1.0, 1.0, 5)


def _vjp(x):
    out, pull = ember.vjp(vec, x)
    return pull(xp.ones_like(out))


TRANSFORMS = {
    "grad": lambda x: ember.grad(f)(x),
    "value_and_grad": lambda x: ember.value_and_grad(f)(x),
    "grad_of_grad": lambda x: ember.grad(lambda t: ember.grad(f)(t)[0])(x),
    "vjp": _vjp,
    "jvp": lambda x: ember.jvp(vec, (x,), (xp.ones_like(x),)),
    "jacfwd": lambda x: ember.jacfwd(vec)(x),
    "jacrev": lambda x: ember.jacrev(vec)(x),
    "hessian": lambda x: ember.hessian(f)(x),
    "hvp": lambda x: ember.hvp(f, (x,), (xp.ones_like(x),)),
    "checkpointed_grad": lambda x: ember.grad(f, checkpointing="balanced")(x),
}


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transform_leaves_no_tape_or_cycle(name, no_gc):
    x = xp.asarray(X)
    result = TRANSFORMS[name](x)
    del result
    assert len(live_traces) == 0, f"{name}: a tape is still alive: {list(live_traces)}"
    assert gc.collect() == 0, f"{name}: its tape was left to the cyclic collector"


def test_vjp_function_keeps_its_tape_until_dropped(no_gc):
    x = xp.asarray(X)
    out, pull = ember.vjp(vec, x)
    (trace,) = list(live_traces)
    first = pull(xp.ones_like(out))[0]
    again = pull(xp.ones_like(out))[0]  # still callable: the tape was retained
    np.testing.assert_array_equal(np.asarray(first.raw), np.asarray(again.raw))
    assert trace.nodes
    ref = weakref.ref(trace)
    del pull, trace
    assert ref() is None, "dropping the VJP function must free its tape"
    assert gc.collect() == 0


def _raises(x):
    _ = xp.sin(x) * x
    raise ValueError("boom")


FAILING = {
    "grad_raises": (lambda x: ember.grad(_raises)(x), ValueError),
    "value_and_grad_raises": (lambda x: ember.value_and_grad(_raises)(x), ValueError),
    "vjp_raises": (lambda x: ember.vjp(_raises, x), ValueError),
    "jvp_raises": (lambda x: ember.jvp(_raises, (x,), (x,)), ValueError),
    "grad_non_scalar": (lambda x: ember.grad(lambda t: xp.sin(t) * t)(x), ember.NotDifferentiableError),
    "grad_bad_aux": (lambda x: ember.grad(lambda t: xp.sum(xp.sin(t)), has_aux=True)(x), TypeError),
}


@pytest.mark.parametrize("name", sorted(FAILING))
def test_failed_transform_frees_its_tape(name, no_gc):
    x = xp.asarray(X)
    call, error = FAILING[name]
    with pytest.raises(error):
        call(x)
    assert len(live_traces) == 0
    assert gc.collect() == 0


def test_grad_of_a_value_that_does_not_depend_on_the_input_frees_the_tape(no_gc):
    def const(x):
        _ = xp.exp(x) * x  # recorded, but the value does not use it
        return xp.asarray(3.0)

    np.testing.assert_array_equal(ember.grad(const)(xp.asarray(X)).raw, np.zeros_like(X))
    assert len(live_traces) == 0
    assert gc.collect() == 0


def test_memory_report_frees_its_tapes(no_gc):
    from ember.autodiff import memory_report

    report = memory_report(lambda x: xp.sum(xp.tanh(xp.exp(x))), xp.asarray(X))
    assert report["none"].total_bytes > 0
    assert len(live_traces) == 0
    assert gc.collect() == 0
