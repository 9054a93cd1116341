"""ember.config: validation, scoping, and the GC threshold used while tapes are live."""

import gc

import pytest

import ember
import ember.autodiff.numpy as xp
from ember._config import BAD_CONFIG, UNKNOWN_CONFIG


def _seen_threshold():
    """grad of a function that records gc's gen-0 threshold while it is traced."""
    seen = []

    def f(x):
        seen.append(gc.get_threshold()[0])
        return xp.sum(xp.sin(x))

    ember.grad(f)(xp.ones(3))
    return seen[0]


def test_gc_threshold_raised_while_tracing_and_restored():
    before = gc.get_threshold()
    assert _seen_threshold() == max(ember._config.CONFIG["gc_threshold"], before[0])
    assert gc.get_threshold() == before


def test_gc_threshold_none_leaves_the_collector_alone():
    before = gc.get_threshold()
    with ember.config(gc_threshold=None):
        assert _seen_threshold() == before[0]
    assert gc.get_threshold() == before


def test_gc_threshold_keeps_a_larger_user_setting_and_a_disabled_collector():
    before = gc.get_threshold()
    try:
        gc.set_threshold(10**7, *before[1:])
        assert _seen_threshold() == 10**7
        gc.set_threshold(0, *before[1:])  # automatic collection off: stays off
        assert _seen_threshold() == 0
    finally:
        gc.set_threshold(*before)


def test_backward_of_a_vjp_function_runs_under_the_threshold(monkeypatch):
    from ember.autodiff._rules import RULES

    seen = []
    rule = RULES["sin"]
    (f0,) = rule.fns

    def spy(*a):
        seen.append(gc.get_threshold()[0])
        return f0(*a)

    monkeypatch.setattr(rule, "fns", (spy,))
    y, pull = ember.vjp(lambda x: xp.sin(x), xp.ones(2))  # the trace is closed here
    before = gc.get_threshold()
    with ember.config(gc_threshold=123_457):
        pull(xp.ones(2))
    assert seen == [max(123_457, before[0])] and gc.get_threshold() == before


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "high"])
def test_gc_threshold_validation(bad):
    with pytest.raises(ValueError, match="gc_threshold must be a positive int or None"):
        ember.config(gc_threshold=bad)


def test_unknown_option_and_scoping():
    with pytest.raises(TypeError, match="unknown option 'nope'"):
        ember.config(nope=1)
    with ember.config(on_hidden_copy="warn") as cfg:
        assert cfg["on_hidden_copy"] == "warn" and ember._config.get_config()["on_hidden_copy"] == "warn"
    assert ember._config.get_config()["on_hidden_copy"] == "ignore"
    assert "{key}" in BAD_CONFIG and "{known}" in UNKNOWN_CONFIG
