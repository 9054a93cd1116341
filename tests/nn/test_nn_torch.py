"""ember.nn layers against PyTorch (same weights) and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason='torch is not installed (pip install -e ".[torch]"): the comparisons with torch.nn are skipped')

import ember  # noqa: E402
import ember.autodiff.numpy as xp  # noqa: E402
import ember.nn as nn  # noqa: E402
import ember.random as er  # noqa: E402
import ember.tree as tree  # noqa: E402

TOL = {np.float32: 1e-6, np.float64: 1e-12}
DTYPES = [np.float32, np.float64]
F = torch.nn.functional


def _rng(seed=0):
    return np.random.default_rng(seed)


def _t(a):
    return torch.tensor(np.asarray(a))


def _e(a):
    return xp.asarray(np.asarray(a))


def _close(ours, theirs, dtype):
    ours = ours.raw if hasattr(ours, "raw") else np.asarray(ours)
    theirs = theirs.detach().numpy()
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype
    tol = TOL[dtype]
    scale = max(1.0, float(np.abs(theirs).max()))
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol * scale)


def _fd_check(fn, args, seed=0, eps=1e-6, directions=3):
    """Directional finite differences of scalar fn(*args) w.r.t. every float64 leaf."""
    g = ember.grad(fn, argnums=tuple(range(len(args))))(*args)
    rng = _rng(seed)
    leaves, tds = zip(*[tree.flatten(a) for a in args])
    gleaves = [tree.leaves(gi) for gi in g]
    for _ in range(directions):
        vs = [[rng.standard_normal(tuple(x.shape)) if nn.is_parameter(x) else None for x in ls]
              for ls in leaves]

        def shifted(s):
            return [
                td.unflatten([x if v is None else x + s * v for x, v in zip(ls, vl)])
                for td, ls, vl in zip(tds, leaves, vs)
            ]

        num = (float(fn(*shifted(eps))) - float(fn(*shifted(-eps)))) / (2 * eps)
        ana = sum(
            float(np.sum(np.asarray(gx.raw if hasattr(gx, "raw") else gx) * v))
            for gl, vl in zip(gleaves, vs) for gx, v in zip(gl, vl) if v is not None
        )
        assert abs(num - ana) <= 1e-6 * max(1.0, abs(num)), (num, ana)


def _proj_loss(layer_call, out_shape, seed=1):
    r = _e(_rng(seed).standard_normal(out_shape))
    return lambda *a: xp.sum(layer_call(*a) * r)


# --- Linear / Embedding / norms ------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear(dtype):
    tl = torch.nn.Linear(5, 4).to(getattr(torch, np.dtype(dtype).name))
    m = nn.Linear(_e(tl.weight.detach().numpy()), _e(tl.bias.detach().numpy()))
    x = _rng().standard_normal((3, 5)).astype(dtype)
    _close(m(_e(x)), tl(_t(x)), dtype)


def test_linear_fd():
    m = nn.Linear.init(er.key(0), 4, 3, dtype="float64", xp=xp)
    x = _e(_rng().standard_normal((2, 4)))
    _fd_check(_proj_loss(lambda m, x: m(x), (2, 3)), (m, x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding(dtype):
    te = torch.nn.Embedding(7, 3).to(getattr(torch, np.dtype(dtype).name))
    m = nn.Embedding(_e(te.weight.detach().numpy()))
    ids = np.array([[0, 6, 2], [2, 2, 1]])
    _close(m(_e(ids)), te(_t(ids)), dtype)
    # repeated ids accumulate gradient
    g = ember.grad(lambda m: xp.sum(m(_e(ids))))(m)
    assert g.weight.raw[2].tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm(dtype):
    tl = torch.nn.LayerNorm((4, 5)).to(getattr(torch, np.dtype(dtype).name))
    with torch.no_grad():
        tl.weight.normal_()
        tl.bias.normal_()
    m = nn.LayerNorm(_e(tl.weight.detach().numpy()), _e(tl.bias.detach().numpy()), (4, 5))
    x = _rng().standard_normal((3, 4, 5)).astype(dtype)
    _close(m(_e(x)), tl(_t(x)), dtype)


def test_layernorm_fd():
    m = nn.LayerNorm.init(6, dtype="float64", xp=xp)
    m = tree.map(lambda a: a + _e(_rng(3).standard_normal(a.shape)), m)
    x = _e(_rng().standard_normal((2, 6)))
    _fd_check(_proj_loss(lambda m, x: m(x), (2, 6)), (m, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 4)])
def test_batchnorm(dtype, shape):
    tb = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d}[len(shape)](3)
    tb = tb.to(getattr(torch, np.dtype(dtype).name))
    with torch.no_grad():
        tb.weight.normal_()
        tb.bias.normal_()
    m = nn.BatchNorm.init(3, dtype=dtype, xp=xp)
    m = m.replace(weight=_e(tb.weight.detach().numpy()), bias=_e(tb.bias.detach().numpy()))
    for seed in range(2):  # two training steps update the running statistics
        x = (_rng(seed).standard_normal(shape) * 2 + 1).astype(dtype)
        y, m = m(_e(x), train=True)
        tb.train()
        _close(y, tb(_t(x)), dtype)
    _close(m.running_mean, tb.running_mean, dtype)
    _close(m.running_var, tb.running_var, dtype)
    tb.eval()
    x = _rng(5).standard_normal(shape).astype(dtype)
    _close(m(_e(x)), tb(_t(x)), dtype)


def test_batchnorm_fd_and_state_not_trained():
    m = nn.BatchNorm.init(3, dtype="float64", xp=xp)
    x = _e(_rng().standard_normal((5, 3, 2)))
    r = _e(_rng(1).standard_normal((5, 3, 2)))
    _fd_check(lambda m, x: xp.sum(m(x, train=True)[0] * r), (m, x))
    assert [str(p) for p, _ in m.parameters()] == ["weight", "bias"]
    g = ember.grad(lambda m: xp.sum(m(x, train=True)[0] * r))(m)
    assert g.running_mean is m.running_mean  # static: kept, not differentiated


# --- conv and pooling -------------------------------------------------------------------

CONV2D_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(padding=(2, 1), dilation=(2, 1)),
    dict(groups=2, padding=1),
    dict(padding="same", dilation=2),
    dict(stride=(1, 2), padding="valid"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", CONV2D_CASES, ids=[str(c) for c in CONV2D_CASES])
def test_conv2d(dtype, kw):
    tc = torch.nn.Conv2d(4, 6, (3, 2), **kw).to(getattr(torch, np.dtype(dtype).name))
    m = nn.Conv2d(_e(tc.weight.detach().numpy()), _e(tc.bias.detach().numpy()),
                  kw.get("stride", 1), kw.get("padding", 0), kw.get("dilation", 1), kw.get("groups", 1))
    x = _rng().standard_normal((2, 4, 9, 8)).astype(dtype)
    _close(m(_e(x)), tc(_t(x)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=2, dilation=2), dict(groups=3, padding="same")])
def test_conv1d(dtype, kw):
    tc = torch.nn.Conv1d(3, 6, 3, **kw).to(getattr(torch, np.dtype(dtype).name))
    m = nn.Conv1d(_e(tc.weight.detach().numpy()), _e(tc.bias.detach().numpy()),
                  kw.get("stride", 1), kw.get("padding", 0), kw.get("dilation", 1), kw.get("groups", 1))
    x = _rng().standard_normal((2, 3, 11)).astype(dtype)
    _close(m(_e(x)), tc(_t(x)), dtype)


def test_conv2d_unbatched():
    tc = torch.nn.Conv2d(2, 3, 3).double()
    m = nn.Conv2d(_e(tc.weight.detach().numpy()), _e(tc.bias.detach().numpy()))
    x = _rng().standard_normal((2, 6, 6))
    _close(m(_e(x)), tc(_t(x)), np.float64)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, groups=2, dilation=(1, 2))])
def test_conv2d_fd(kw):
    m = nn.Conv2d.init(er.key(1), 2, 4, 3, dtype="float64", xp=xp, **kw)
    x = _e(_rng().standard_normal((2, 2, 6, 7)))
    out = m(x).shape
    _fd_check(_proj_loss(lambda m, x: m(x), out), (m, x))


def test_conv2d_gradients_match_torch():
    tc = torch.nn.Conv2d(3, 5, 3, stride=2, padding=1).double()
    m = nn.Conv2d(_e(tc.weight.detach().numpy()), _e(tc.bias.detach().numpy()), 2, 1)
    x = _rng().standard_normal((2, 3, 7, 7))
    tx = _t(x).requires_grad_()
    (tc(tx) ** 2).sum().backward()
    gm, gx = ember.grad(lambda m, x: xp.sum(m(x) ** 2), argnums=(0, 1))(m, _e(x))
    _close(gm.weight, tc.weight.grad, np.float64)
    _close(gm.bias, tc.bias.grad, np.float64)
    _close(gx, tx.grad, np.float64)


POOL_CASES = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", POOL_CASES, ids=[str(c) for c in POOL_CASES])
def test_pools(dtype, kw):
    x = _rng().standard_normal((2, 3, 8, 7)).astype(dtype)
    _close(nn.MaxPool2d(**kw)(_e(x)), torch.nn.MaxPool2d(**kw)(_t(x)), dtype)
    _close(nn.AvgPool2d(**kw)(_e(x)), torch.nn.AvgPool2d(**kw)(_t(x)), dtype)
    if kw.get("padding"):
        ours = nn.AvgPool2d(**kw, count_include_pad=False)(_e(x))
        _close(ours, torch.nn.AvgPool2d(**kw, count_include_pad=False)(_t(x)), dtype)


def test_maxpool_dilation_and_1d():
    x = _rng().standard_normal((2, 3, 9, 9))
    _close(nn.MaxPool2d(3, 2, 1, 2)(_e(x)), torch.nn.MaxPool2d(3, 2, 1, 2)(_t(x)), np.float64)
    x1 = _rng().standard_normal((2, 3, 10))
    _close(nn.MaxPool1d(3, 2)(_e(x1)), torch.nn.MaxPool1d(3, 2)(_t(x1)), np.float64)
    _close(nn.AvgPool1d(2)(_e(x1)), torch.nn.AvgPool1d(2)(_t(x1)), np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", [2, (2, 3), (1, 2)])
def test_tiled_maxpool_gradient_matches_torch_at_ties(dtype, kernel):
    """Windows that tile the input are one node; a tied window's gradient goes to its first
    maximal element in row-major order, as PyTorch's does, and every other element gets 0."""
    x = np.round(_rng().standard_normal((2, 3, 4, 6)) * 2).astype(dtype)  # many ties
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x[0, 0, :kh, :kw] = 7.0  # the first window: all its elements equal maxima
    w = _rng().standard_normal(nn.MaxPool2d(kernel)(_e(x)).shape).astype(dtype)
    tx = _t(x).requires_grad_()
    (torch.nn.MaxPool2d(kernel)(tx) * _t(w)).sum().backward()
    g = ember.grad(lambda x: xp.sum(nn.MaxPool2d(kernel)(x) * _e(w)))(_e(x))
    _close(g, tx.grad, dtype)
    assert g.raw[0, 0, 0, 0] == w[0, 0, 0, 0] and not g.raw[0, 0, :kh, :kw].ravel()[1:].any()


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)])
def test_pools_fd(kw):
    x = _e(_rng().standard_normal((2, 2, 6, 6)))
    for layer in (nn.MaxPool2d(**kw), nn.AvgPool2d(**kw)):
        _fd_check(_proj_loss(lambda x: layer(x), layer(x).shape), (x,))


# --- containers, attention, dropout -------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_and_sequential(dtype):
    tdt = getattr(torch, np.dtype(dtype).name)
    ts = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 8),
                             torch.nn.SiLU(), torch.nn.Linear(8, 2)).to(tdt)
    lin = [nn.Linear(_e(ts[i].weight.detach().numpy()), _e(ts[i].bias.detach().numpy())) for i in (0, 2, 4)]
    mlp = nn.MLP([(lin[0], nn.gelu), (lin[1], nn.silu)], lin[2])
    seq = nn.Sequential([lin[0], nn.gelu, lin[1], nn.silu, lin[2]])
    x = _rng().standard_normal((3, 4)).astype(dtype)
    _close(mlp(_e(x)), ts(_t(x)), dtype)
    _close(seq(_e(x)), ts(_t(x)), dtype)
    _close(nn.apply([[lin[0], nn.gelu], (lin[1], nn.silu), lin[2]], _e(x)), ts(_t(x)), dtype)


def test_mlp_fd():
    m = nn.MLP.init(er.key(2), 3, [5], 2, activation=nn.gelu, dtype="float64", xp=xp)
    x = _e(_rng().standard_normal((4, 3)))
    _fd_check(_proj_loss(lambda m, x: m(x), (4, 2)), (m, x))


def _mha_pair(dtype, kdim=None):
    tdt = getattr(torch, np.dtype(dtype).name)
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=True, kdim=kdim, vdim=kdim).to(tdt)
    with torch.no_grad():
        for p in tm.parameters():
            p.normal_(0, 0.3)
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    if kdim is None:
        wq, wk, wv = np.split(sd["in_proj_weight"], 3)
    else:
        wq, wk, wv = sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]
    bq, bk, bv = np.split(sd["in_proj_bias"], 3)
    m = nn.MultiHeadAttention(
        nn.Linear(_e(wq), _e(bq)), nn.Linear(_e(wk), _e(bk)), nn.Linear(_e(wv), _e(bv)),
        nn.Linear(_e(sd["out_proj.weight"]), _e(sd["out_proj.bias"])), 2,
    )
    return tm, m


@pytest.mark.parametrize("dtype", DTYPES)
def test_multihead_attention(dtype):
    tm, m = _mha_pair(dtype)
    q = _rng(1).standard_normal((2, 5, 8)).astype(dtype)
    kv = _rng(2).standard_normal((2, 4, 8)).astype(dtype)
    _close(m(_e(q), _e(kv), _e(kv)), tm(_t(q), _t(kv), _t(kv), need_weights=False)[0], dtype)
    _close(m(_e(q)), tm(_t(q), _t(q), _t(q), need_weights=False)[0], dtype)
    causal = np.triu(np.ones((5, 5), bool), 1)  # torch: True = masked out
    theirs = tm(_t(q), _t(q), _t(q), attn_mask=_t(causal), need_weights=False)[0]
    _close(m(_e(q), causal=True), theirs, dtype)
    _close(m(_e(q), mask=_e(~causal)), theirs, dtype)


def test_multihead_attention_kdim_and_fd():
    tm, m = _mha_pair(np.float64, kdim=6)
    q = _rng(1).standard_normal((2, 3, 8))
    kv = _rng(2).standard_normal((2, 4, 6))
    _close(m(_e(q), _e(kv), _e(kv)), tm(_t(q), _t(kv), _t(kv), need_weights=False)[0], np.float64)
    _fd_check(_proj_loss(lambda m, q: m(q, _e(kv), _e(kv)), (2, 3, 8)), (m, _e(q)))


def test_dropout_matches_torch_statistics():
    x = xp.ones((200, 100), dtype=xp.float64)
    y = nn.Dropout(0.25)(x, key=er.key(0)).raw
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.75)  # torch scales kept values by 1/(1-p)
    assert nn.Dropout(0.25)(x) is x  # no key: inference


# --- activations and losses --------------------------------------------------------------

ACTS = [
    (nn.relu, F.relu), (nn.gelu, F.gelu), (lambda x: nn.gelu(x, approximate=True),
                                            lambda x: F.gelu(x, approximate="tanh")),
    (nn.silu, F.silu), (nn.sigmoid, torch.sigmoid), (nn.tanh, torch.tanh),
    (nn.softmax, lambda x: F.softmax(x, dim=-1)), (nn.log_softmax, lambda x: F.log_softmax(x, dim=-1)),
    (lambda x: nn.softmax(x, axis=0), lambda x: F.softmax(x, dim=0)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("i", range(len(ACTS)))
def test_activations(dtype, i):
    ours, theirs = ACTS[i]
    x = (_rng().standard_normal((4, 50)) * 4).astype(dtype)
    x[0, :6] = [-40.0, -9.0, -4.5, 0.0, 4.5, 40.0]
    _close(ours(_e(x)), theirs(_t(x)), dtype)


@pytest.mark.parametrize("i", range(len(ACTS)))
def test_activations_fd(i):
    ours = ACTS[i][0]
    x = _e(_rng().standard_normal((3, 5)) * 2 + 0.1)
    _fd_check(_proj_loss(ours, (3, 5)), (x,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_losses(dtype):
    rng = _rng()
    p = rng.standard_normal((6, 5)).astype(dtype)
    t = rng.standard_normal((6, 5)).astype(dtype)
    labels = rng.integers(0, 5, 6)
    probs = np.abs(t) / np.abs(t).sum(-1, keepdims=True)
    bt = (rng.random((6, 5)) > 0.5).astype(dtype)
    pw = (rng.random(5) + 0.5).astype(dtype)
    for red in ("mean", "sum", "none"):
        _close(nn.mse(_e(p), _e(t), reduction=red), F.mse_loss(_t(p), _t(t), reduction=red), dtype)
        _close(nn.huber(_e(p), _e(t), delta=0.7, reduction=red),
               F.huber_loss(_t(p), _t(t), delta=0.7, reduction=red), dtype)
        _close(nn.binary_cross_entropy_with_logits(_e(p * 5), _e(bt), reduction=red),
               F.binary_cross_entropy_with_logits(_t(p * 5), _t(bt), reduction=red), dtype)
        for ls in (0.0, 0.2):
            _close(nn.cross_entropy(_e(p), _e(labels), label_smoothing=ls, reduction=red),
                   F.cross_entropy(_t(p), _t(labels), label_smoothing=ls, reduction=red), dtype)
            _close(nn.cross_entropy(_e(p), _e(probs), label_smoothing=ls, reduction=red),
                   F.cross_entropy(_t(p), _t(probs), label_smoothing=ls, reduction=red), dtype)
    _close(nn.binary_cross_entropy_with_logits(_e(p), _e(bt), pos_weight=_e(pw)),
           F.binary_cross_entropy_with_logits(_t(p), _t(bt), pos_weight=_t(pw)), dtype)
    # class axis 1 of (N, C, L) logits, like torch
    p3 = rng.standard_normal((2, 5, 3)).astype(dtype)
    l3 = rng.integers(0, 5, (2, 3))
    _close(nn.cross_entropy(_e(p3), _e(l3), axis=1), F.cross_entropy(_t(p3), _t(l3)), dtype)


def test_losses_fd():
    rng = _rng()
    p = _e(rng.standard_normal((4, 3)))
    t = _e(rng.standard_normal((4, 3)))
    labels = _e(rng.integers(0, 3, 4))
    bt = _e((rng.random((4, 3)) > 0.5).astype(np.float64))
    _fd_check(lambda p, t: nn.mse(p, t), (p, t))
    _fd_check(lambda p, t: nn.huber(p, t, delta=0.5), (p, t))
    _fd_check(lambda p: nn.cross_entropy(p, labels, label_smoothing=0.1), (p,))
    _fd_check(lambda p: nn.binary_cross_entropy_with_logits(p, bt), (p,))
