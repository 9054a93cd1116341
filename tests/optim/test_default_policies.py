"""The default policies act (a new path starts fresh, a reshaped entry is re-initialised, a
stale one is kept) but say so: one StateMismatchWarning naming the paths, and how to
silence it. Explicit policies act quietly (issue 40, "Errors and exposure")."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember.optim as optim
from ember.optim.policies import ADDED_PART, CHANGED_PART, REMOVED_PART, STATE_MISMATCH


def _zeros(n):
    return np.zeros(n, np.float32)


def _ones_like(params):
    return {k: np.ones_like(v) for k, v in params.items()}


def _step(opt, params, state):
    return opt.update(params, _ones_like(params), state)


def _label(template):
    """The fixed words of a part template (before its first field)."""
    return template.split("{", 1)[0].strip()


@pytest.mark.parametrize("make", [lambda **kw: optim.Adam(0.1, **kw),
                                  lambda **kw: optim.SGD(0.1, momentum=0.9, **kw)])
def test_a_renamed_parameter_is_named_both_ways(make):
    opt = make()
    state = opt.init({"enc_w": _zeros(2), "b": _zeros(1)})
    params = {"encoder_w": _zeros(2), "b": _zeros(1)}
    with pytest.warns(optim.StateMismatchWarning) as rec:
        _, state = _step(opt, params, state)
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert msg.startswith(f"{type(opt).__name__}.update: ")
    assert _label(ADDED_PART) in msg and "encoder_w" in msg
    assert _label(REMOVED_PART) in msg and "enc_w" in msg
    assert "ember.optim.rename(state, old, new)" in msg and "on_new=" in msg and "on_missing=" in msg
    assert rec[0].filename == __file__  # points at the caller's update
    # the behaviour of the defaults is unchanged: fresh state for the new path, stale one kept
    assert state["params"]["encoder_w"]["step"] == 1 and "enc_w" in state["params"]
    # the kept entry stays stale at every later step, but is named once
    with warnings.catch_warnings():
        warnings.simplefilter("error", optim.StateMismatchWarning)
        _step(opt, params, state)


def test_a_reshaped_parameter_is_named():
    opt = optim.Adam(0.1)
    state = opt.init({"w": _zeros(2)})
    with pytest.warns(optim.StateMismatchWarning) as rec:
        _, state = _step(opt, {"w": _zeros(3)}, state)
    msg = str(rec[0].message)
    assert _label(CHANGED_PART) in msg and "w (m has shape (2,), parameter (3,))" in msg
    assert state["params"]["w"]["m"].shape == (3,)


def test_a_removed_parameter_is_named_once():
    opt = optim.SGD(0.1, momentum=0.9)
    state = opt.init({"a": _zeros(2), "b": _zeros(2)})
    with pytest.warns(optim.StateMismatchWarning, match=r"kept \(on_missing='keep'\): b"):
        _, state = _step(opt, {"a": _zeros(2)}, state)
    with warnings.catch_warnings():
        warnings.simplefilter("error", optim.StateMismatchWarning)
        _step(opt, {"a": _zeros(2)}, state)


@pytest.mark.parametrize("kw", [dict(on_new="init", on_missing="keep"),
                                dict(on_new="init", on_missing="drop")])
def test_explicit_policies_are_quiet(kw):
    opt = optim.Adam(0.1, **kw)
    state = opt.init({"enc_w": _zeros(2), "v": _zeros(2)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", optim.StateMismatchWarning)
        _, state = _step(opt, {"encoder_w": _zeros(2), "v": _zeros(3)}, state)
    assert ("enc_w" in state["params"]) == (kw["on_missing"] == "keep")


def test_one_explicit_policy_leaves_the_other_warning():
    """on_missing given: stale entries are expected; new paths (on_new's default) still warn."""
    opt = optim.Adam(0.1, on_missing="drop")
    state = opt.init({"enc_w": _zeros(2)})
    with pytest.warns(optim.StateMismatchWarning) as rec:
        _step(opt, {"encoder_w": _zeros(2)}, state)
    msg = str(rec[0].message)
    assert "encoder_w" in msg and _label(REMOVED_PART) not in msg


def test_a_matching_state_is_quiet_and_the_defaults_read_as_before():
    opt = optim.Adam(0.1)
    assert (opt.on_new, opt.on_missing) == ("init", "keep") and repr(opt) == repr(optim.Adam(0.1))
    params = {"w": _zeros(2)}
    state = opt.init(params)
    with warnings.catch_warnings():
        warnings.simplefilter("error", optim.StateMismatchWarning)
        for _ in range(2):
            params, state = _step(opt, params, state)
    assert STATE_MISMATCH.startswith("{op}: ")


def test_load_state_reports_instead_of_warning():
    opt = optim.Adam(0.1)
    state = opt.init({"enc_w": _zeros(2)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", optim.StateMismatchWarning)
        _, report = optim.load_state(opt, state, {"encoder_w": _zeros(2)})
    assert report.added == ("encoder_w",) and report.removed == ("enc_w",)
