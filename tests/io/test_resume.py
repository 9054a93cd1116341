"""Resume: a run checkpointed at step k with ember.io and resumed is bit-identical at step n.

The checkpoint is one file holding ``{"params": ..., "opt_state": ...}``; the
resumed run builds a new optimizer object, loads the file without ``like=``
(so the per-parameter step counts come from the file), and fits the state
with :func:`ember.optim.load_state`, which must find nothing to change.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

import ember.optim as optim
from ember._errors import StructureError
import ember.tree as tree
from ember.optim import Group, schedules

io = pytest.importorskip("ember.io")  # written separately; these tests run once it imports

K, N = 7, 20


@tree.register
@dataclasses.dataclass
class Block:
    weight: object
    bias: object


def make_params():
    r = np.random.default_rng(3)
    return {
        "encoder": [Block(r.standard_normal((4, 4)).astype(np.float32), np.zeros(4, np.float32)) for _ in range(2)],
        "head": {"weight": r.standard_normal((4, 2)).astype(np.float32), "norm": np.ones(2, np.float32)},
        "steps_seen": np.zeros((), np.int64),  # an integer leaf: not a parameter
    }


X = np.random.default_rng(4).standard_normal((8, 4)).astype(np.float32)


def grads_at(params, t):
    """Deterministic gradients depending on the parameters and the step (the 'data order')."""
    x = np.roll(X, t, axis=0)
    out = {"encoder": [], "head": {}, "steps_seen": params["steps_seen"]}
    h = x
    for blk in params["encoder"]:
        h = np.tanh(h @ blk.weight + blk.bias)
        out["encoder"].append(Block(np.float32(0.01) * blk.weight + h.T @ h / 8, h.mean(0)))
    z = h @ params["head"]["weight"]  # loss 0.5 * mean((z * norm) ** 2) for the head
    y = z * params["head"]["norm"]
    out["head"]["weight"] = h.T @ (y * params["head"]["norm"]) / np.float32(8)
    out["head"]["norm"] = (y * z).mean(0)
    return out


def optimizers():
    sched = schedules.linear_warmup(schedules.cosine(0.05, total_steps=N), warmup_steps=3)
    groups = [
        Group("encoder.*", exclude="*.bias", lr_scale=0.5, name="encoder"),
        Group(["*.bias", "*norm*"], weight_decay=0.0, name="no_decay"),
        Group(name="rest"),
    ]
    return {
        "sgd": lambda: optim.SGD(0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        "sgd_plain": lambda: optim.SGD(sched),
        "adam": lambda: optim.Adam(0.01, amsgrad=True, weight_decay=0.01),
        "adamw_groups_clip": lambda: optim.AdamW(sched, weight_decay=0.1, groups=groups, clip_norm=0.5),
        "rmsprop": lambda: optim.RMSprop(0.01, centered=True, momentum=0.5, weight_decay=0.01),
        "adagrad": lambda: optim.Adagrad(0.05, lr_decay=0.01, initial_accumulator_value=0.1),
        "lion": lambda: optim.Lion(sched, weight_decay=0.1, freeze="head.norm"),
    }


def run(opt, params, state, start, stop):
    for t in range(start, stop):
        params, state = opt.update(params, grads_at(params, t), state)
    return params, state


def assert_bit_identical(a, b):
    la, ta = tree.flatten(a)
    lb, tb = tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("name", sorted(optimizers()))
def test_resume_is_bit_identical(name, tmp_path):
    make = optimizers()[name]
    opt = make()
    params0 = make_params()
    ref_params, ref_state = run(opt, params0, opt.init(params0), 0, N)

    opt = make()
    params, state = run(opt, params0, opt.init(params0), 0, K)
    path = os.path.join(tmp_path, "ckpt.safetensors")
    io.save(path, {"params": params, "opt_state": state})
    del params, state

    opt = make()  # a new process would build a new optimizer object
    ckpt = io.load(path)
    state, report = optim.load_state(opt, ckpt["opt_state"], ckpt["params"])
    assert report.clean, str(report)
    assert state["step"] == K
    params, state = run(opt, ckpt["params"], state, K, N)

    assert_bit_identical(params, ref_params)
    assert_bit_identical(state, ref_state)
    assert state["step"] == N
    assert all(np.isfinite(x).all() for x in tree.leaves(params))
    assert not np.array_equal(params["head"]["weight"], params0["head"]["weight"])


def test_resume_with_stateful_wrapper(tmp_path):
    make = optimizers()["adam"]
    params0 = make_params()
    ref = optim.Stateful(make(), params0)
    ref_params = params0
    for t in range(N):
        ref_params = ref.step(ref_params, grads_at(ref_params, t))

    opt = optim.Stateful(make(), params0)
    params = params0
    for t in range(K):
        params = opt.step(params, grads_at(params, t))
    path = os.path.join(tmp_path, "ckpt.safetensors")
    io.save(path, {"params": params, "opt_state": opt.state})

    ckpt = io.load(path)
    opt = optim.Stateful(make(), ckpt["params"], ckpt["opt_state"])
    assert opt.report.clean and opt.step_count == K
    params = ckpt["params"]
    for t in range(K, N):
        params = opt.step(params, grads_at(params, t))
    assert_bit_identical(params, ref_params)


def test_resume_into_grown_model_reports_new_layer(tmp_path):
    """A checkpoint of a smaller model resumes a grown one: old paths continue, new ones start fresh."""
    opt = optim.Adam(0.01)
    params0 = make_params()
    params, state = run(opt, params0, opt.init(params0), 0, K)
    path = os.path.join(tmp_path, "ckpt.safetensors")
    io.save(path, {"params": params, "opt_state": state})

    ckpt = io.load(path)
    grown = dict(ckpt["params"], encoder=ckpt["params"]["encoder"] + [Block(np.eye(4, dtype=np.float32),
                                                                              np.zeros(4, np.float32))])
    state, report = optim.load_state(opt, ckpt["opt_state"], grown)
    assert report.added == ("encoder.2.bias", "encoder.2.weight") and not report.removed
    assert state["params"]["encoder.0.weight"]["step"] == K
    with pytest.raises(StructureError, match="encoder.2.weight"):
        optim.load_state(opt, ckpt["opt_state"], grown, on_new="error")
