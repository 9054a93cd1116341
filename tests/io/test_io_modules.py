"""Every ember.nn module type saves and loads with ember.io; functions by name, never pickle.

The module types are discovered from ``ember.nn.__all__``; EXAMPLES must
build one of each, so a new module type without an example fails here.
"""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember.io as io
import ember.nn as nn
import ember.random as er
import ember.tree as tree
from ember._errors import FileFormatError, StructureError
from ember.io import _format, _functions

K = er.key(0)

EXAMPLES = {
    nn.Linear: lambda: nn.Linear.init(K, 3, 4),
    nn.Conv1d: lambda: nn.Conv1d.init(K, 2, 4, 3, padding=1, stride=(2,)),
    nn.Conv2d: lambda: nn.Conv2d.init(K, 2, 4, (3, 2), padding="same", groups=2),
    nn.MaxPool1d: lambda: nn.MaxPool1d(2),
    nn.MaxPool2d: lambda: nn.MaxPool2d((2, 1), stride=1),
    nn.AvgPool1d: lambda: nn.AvgPool1d(3, padding=1, count_include_pad=False),
    nn.AvgPool2d: lambda: nn.AvgPool2d(2),
    nn.Embedding: lambda: nn.Embedding.init(K, 5, 3),
    nn.LayerNorm: lambda: nn.LayerNorm.init(3),
    nn.BatchNorm: lambda: nn.BatchNorm.init(2),
    nn.Dropout: lambda: nn.Dropout(0.25),
    nn.Sequential: lambda: nn.Sequential([nn.Linear.init(K, 3, 4), nn.relu, nn.Dropout(0.1),
                                          (nn.Linear.init(K, 4, 2), functools.partial(nn.gelu, approximate=True))]),
    nn.MLP: lambda: nn.MLP.init(K, 3, [4, 5], 2, activation=nn.silu),
    nn.MultiHeadAttention: lambda: nn.MultiHeadAttention.init(K, 4, 2),
}

INPUTS = {
    nn.Conv1d: (2, 2, 6), nn.Conv2d: (2, 2, 5, 4), nn.MaxPool1d: (2, 2, 6), nn.MaxPool2d: (2, 2, 5, 4),
    nn.AvgPool1d: (2, 2, 6), nn.AvgPool2d: (2, 2, 4, 4), nn.BatchNorm: (3, 2), nn.MultiHeadAttention: (2, 3, 4),
}


def _module_types():
    out = []
    for name in nn.__all__:
        obj = getattr(nn, name)
        if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj is not nn.Module:
            out.append(obj)
    return out


def _input(cls):
    if cls is nn.Embedding:
        return np.array([[0, 4], [2, 1]])
    return np.random.default_rng(1).standard_normal(INPUTS.get(cls, (2, 3))).astype(np.float32)


def _same_structure(a, b):
    pa, ta = tree.flatten_with_path(a)
    pb, tb = tree.flatten_with_path(b)
    assert [str(p) for p, _ in pa] == [str(p) for p, _ in pb]
    for (p, x), (_, y) in zip(pa, pb):
        assert type(y) is np.ndarray and x.dtype == y.dtype and x.shape == y.shape, str(p)
        np.testing.assert_array_equal(np.asarray(x), y, err_msg=str(p))
    # constants (functions, static fields) equal; functools.partial compares by identity, so by repr
    assert ta == tb or repr(ta) == repr(tb)


def test_examples_cover_every_exported_module_type():
    types = _module_types()
    assert len(types) >= 10  # discovery works
    assert set(types) <= set(EXAMPLES), f"add an example for {set(types) - set(EXAMPLES)}"


@pytest.mark.parametrize("cls", _module_types(), ids=lambda c: c.__name__)
def test_every_module_type_round_trips(cls, tmp_path):
    model = EXAMPLES[cls]()
    p = str(tmp_path / "m.safetensors")
    io.save(p, {"model": model, "step": 3})
    back = io.load(p)["model"]
    assert type(back) is cls
    _same_structure(model, back)
    x = _input(cls)
    np.testing.assert_allclose(np.asarray(back(x)), np.asarray(model(x)), rtol=1e-6)
    if cls is nn.Sequential:
        act = back.layers[3][1]
        assert act.func is nn.gelu and act.keywords == {"approximate": True}
    # like= gives the same, onto like's leaves
    again = io.load(p, like={"model": EXAMPLES[cls](), "step": 0})
    assert again["step"] == 3
    _same_structure(model, again["model"])


def test_mlp_and_sequential_with_relu_store_the_function_by_name(tmp_path):
    p = str(tmp_path / "mlp.safetensors")
    io.save(p, [nn.MLP.init(K, 3, [4], 2), nn.Sequential([nn.Linear.init(K, 3, 3), nn.relu])])
    mlp, seq = io.load(p)
    assert mlp.hidden[0][1] is nn.relu and seq.layers[1] is nn.relu
    from safetensors import safe_open

    with safe_open(p, framework="numpy") as f:
        assert '"name":"ember.nn.relu"' in f.metadata()["ember"]


def swish(x):
    return x / (1 + np.exp(-x))


def test_user_callable_needs_registration_or_opt_in(tmp_path):
    p = str(tmp_path / "user.safetensors")
    model = nn.MLP.init(K, 3, [4], 2, activation=swish)
    with pytest.raises(StructureError) as ei:
        io.save(p, model)
    assert "hidden.0.1" in str(ei.value) and "register_function" in str(ei.value)
    assert "allow_callables=True" in str(ei.value)
    assert not os.path.exists(p)
    # opt-in: stored by import path, loaded only with the opt-in
    io.save(p, model, allow_callables=True)
    with pytest.raises(FileFormatError, match="allow_callables=True"):
        io.load(p)
    assert io.load(p, allow_callables=True).hidden[0][1] is swish
    # like= supplies callables without the opt-in
    assert io.load(p, like=nn.MLP.init(K, 3, [4], 2, activation=swish)).hidden[0][1] is swish
    # lambdas have no import path
    with pytest.raises(StructureError, match="no import path"):
        io.save(p, {"f": lambda x: x}, allow_callables=True)


def test_register_function_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(_functions, "_BY_NAME", dict(_functions._BY_NAME))
    monkeypatch.setattr(_functions, "_BY_ID", dict(_functions._BY_ID))

    def act(x):
        return x * 2

    assert io.register_function(act, "tests.double") is act
    p = str(tmp_path / "reg.safetensors")
    io.save(p, nn.Sequential([act]))
    assert io.load(p).layers[0] is act
    with pytest.raises(ValueError, match="already registered"):
        io.register_function(lambda x: x, "tests.double")
    del _functions._BY_NAME["tests.double"]
    with pytest.raises(FileFormatError, match="register_function"):
        io.load(p)


def test_callable_import_path_from_a_hostile_file_is_checked(tmp_path):
    p = str(tmp_path / "hostile.safetensors")
    io.save(p, {"f": swish}, allow_callables=True)
    from safetensors import safe_open
    import safetensors.numpy as sn

    with safe_open(p, framework="numpy") as f:
        md = f.metadata()
    md["ember"] = md["ember"].replace(f"{__name__}:swish", "os:no_such_thing")
    sn.save_file({}, p, metadata=md)
    with pytest.raises(FileFormatError, match="cannot be imported"):
        io.load(p, allow_callables=True)


def _src_path() -> str:
    import ember

    return os.path.dirname(os.path.dirname(os.path.abspath(ember.__path__[0])))


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_train_checkpoint_loads_with_public_io_in_a_fresh_process(tmp_path, model):
    pytest.importorskip("sklearn", reason="ember train's digits data come from scikit-learn")
    env = dict(os.environ, PYTHONPATH=_src_path() + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "ember", "train", "--quick", "--epochs", "1", "--model", model,
                        "--out", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    check = textwrap.dedent(
        """
        import sys, numpy as np, ember.io
        ck = ember.io.load(sys.argv[1])
        m = ck["model"]
        x = np.zeros((2, 64), np.float32) if type(m).__name__ == "MLP" else np.zeros((2, 1, 8, 8), np.float32)
        print(type(m).__name__, ck["epoch"], np.asarray(m(x)).shape)
        """
    )
    r = subprocess.run([sys.executable, "-c", check, str(out / "checkpoint.safetensors")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [{"mlp": "MLP", "cnn": "DigitsCNN"}[model], "1", "(2,", "10)"]
