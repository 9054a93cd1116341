"""ember's own fused ops, each one :func:`ember.primitive`: one tape node and a fused VJP.

``ember.nn`` builds its layers from these (``linear``, ``layer_norm``, ``relu``,
``gelu_tanh``, ``erf``, ``softmax``, ``log_softmax``, ``softmax_cross_entropy``,
``max_pool_tiles``) through the same public API a user's primitive takes
(``defvjp``, ``defvjp_all``, ``defjvp``, ``defresiduals``, ``specialize``), so
they work under every transform and on every backend. On backend arrays that
are not Tensors each is just its forward. The forwards are ``ember.kernels``'
array-API math; the VJPs live with the other rules in ``autodiff/_rules``.
"""

from __future__ import annotations

from typing import Any

from ..kernels import check_linear, erf_series, in_place, layer_norm as _layer_norm
from ..kernels import max_pool_tiles as _max_pool_tiles
from ..kernels import max_last, relu as _relu, sum_last
from ._primitive import Primitive
from ._rules import elementwise as _ew
from ._rules.linear import linear_jvp, linear_vjp
from ._rules.normalization import layer_norm_vjp
from ._rules.pooling import max_pool_tiles_vjp
from ._rules._util import rows as _rows

__all__ = ["relu", "erf", "gelu_tanh", "softmax", "log_softmax", "softmax_cross_entropy",
           "layer_norm", "max_pool_tiles", "linear"]


def _complex_dtypes(xp) -> tuple:
    return getattr(xp, "_complex", None) or tuple(
        getattr(xp, n) for n in ("complex64", "complex128") if hasattr(xp, n))


# ----- elementwise -----------------------------------------------------------------------------
relu = Primitive(_relu, name="_relu", elementwise=True, fresh=True)
"""``max(x, 0)`` in x's dtype; the gradient at 0 is 0 (PyTorch's and JAX's choice). The mask is
read off the result (relu(x) > 0 exactly where x > 0), so the tape keeps no input."""
relu.defvjp(_ew.relu_vjp, saves=("none",))


def _erf_forward(xp, x):
    kernel = getattr(xp, "_erf_kernel", None)  # NumPy: scipy.special.erf where installed
    if kernel is not None and x.dtype in (xp.float32, xp.float64):
        return kernel(x)
    return erf_series(xp, x)


erf = Primitive(_erf_forward, name="_erf", elementwise=True, fresh=True)
"""The error function (a Chebyshev series; SciPy's kernel on NumPy where installed)."""
erf.defvjp(_ew.erf_vjp)


def _gelu_tanh(xp, x, keep_s):
    """``(x s, s)``, ``s = (1 + tanh(u)) / 2`` (``_ew.gelu_tanh_s``); in place where
    :func:`in_place`, into ``s``'s buffer unless ``keep_s``."""
    s = _ew.gelu_tanh_s(xp, x, x * x, spend_x2=True)
    if keep_s or not in_place(xp, x):
        return x * s, s
    s *= x
    return s, None


def _gelu_tanh_forward(xp, x):
    return _gelu_tanh(xp, x, False)[0]


def _gelu_tanh_and_s(xp, x):
    y, s = _gelu_tanh(xp, x, True)
    return y, {"s": s}


gelu_tanh = Primitive(_gelu_tanh_forward, name="_gelu_tanh", elementwise=True, fresh=True)
"""GELU's tanh form ``0.5 x (1 + tanh(u))`` as one node instead of nine. Under ``jit(grad)``
its op also yields ``s = (1 + tanh(u)) / 2`` for the VJP; an eager tape keeps only ``x`` (the
VJP recomputes ``s``: one input-sized array less per layer)."""
gelu_tanh.defvjp(_ew.gelu_tanh_vjp).defresiduals(_gelu_tanh_and_s, jit_only=True)


# ----- softmax and the cross-entropy -----------------------------------------------------------
def _log_softmax_forward(xp, x, axis):
    s = x - max_last(xp, x, axis, keepdims=True)
    return s - xp.log(sum_last(xp, xp.exp(s), axis, keepdims=True))


def _softmax_forward(xp, x, axis):
    e = xp.exp(x - max_last(xp, x, axis, keepdims=True))
    s = sum_last(xp, e, axis, keepdims=True)
    if in_place(xp, e):  # (e is this function's own: the same quotient, one array less)
        e /= s
        return e
    return e / s


softmax = Primitive(_softmax_forward, name="_softmax", fresh=True)
"""``exp(x) / sum(exp(x))`` along ``axis``; VJP ``y * (g - sum(g * y))``."""
softmax.defvjp(_ew.softmax_vjp).defjvp(_ew.softmax_jvp)
log_softmax = Primitive(_log_softmax_forward, name="_log_softmax", fresh=True)
"""``x - logsumexp(x)`` along ``axis``; VJP ``g - exp(l) * sum(g)``."""
log_softmax.defvjp(_ew.log_softmax_vjp).defjvp(_ew.log_softmax_jvp)


def _mean_rows(shape, axis):
    """The rows a mean over the per-row losses divides by; None where a size is unknown or
    ``axis`` is out of range (the per-row sum then raises the axis error)."""
    return _rows(shape, axis % len(shape)) if -len(shape) <= axis < len(shape) else None


def _ce_loss(xp, terms, axis, reduction, n=None):
    """``-sum(terms)`` along ``axis`` per row ("none"), or its sum or mean over the rows, taken
    as one full sum: reductions along short rows (10 classes) cost NumPy about twice a full
    one. ``n``: the mean's row count where the caller has it."""
    if reduction == "none":
        return -xp.sum(terms, axis=axis)
    total = -xp.sum(terms)
    if reduction == "sum":
        return total
    if n is None:
        n = _mean_rows(terms.shape, axis)
    if n:  # sizes known and rows there (none: the mean's own NaN and warning)
        return total / n
    return xp.mean(-xp.sum(terms, axis=axis))


def _ce_forward(xp, z, t, axis, reduction="none"):
    return _ce_loss(xp, t * _log_softmax_forward(xp, z, axis), axis, reduction)


def _ce_forward_and_dz(xp, z, t, axis, reduction="none"):
    """The loss, and its gradient for a unit cotangent as the VJP's residual: of each row's
    loss (reduction "none", or where the rows are not counted yet: ``dz``), else of the sum
    or mean itself (``dz_unit``, the mean's division done here).

    ``xp`` is a backend namespace (residuals are computed on raw arrays). The steps of
    ``shifted_exp``, ``ce_dz`` and ``_ce_loss`` are written out: on a classifier's logits
    between two GEMMs, those frames cost about what the arithmetic does.
    """
    s = z - max_last(xp, z, axis, keepdims=True)
    e = xp.exp(s)
    total = sum_last(xp, e, axis, keepdims=True)
    q = sum_last(xp, t, axis, keepdims=True) / total
    terms = s - xp.log(total)
    own = in_place(xp, e)
    if own and t.shape == e.shape and t.dtype == e.dtype == q.dtype:
        e *= q  # (e, terms: this function's own; the same operations as below)
        e -= t
        dz = e
        terms *= t
    else:
        dz = e * q - t
        terms = t * terms
    if reduction == "none":
        return -xp.sum(terms, axis=axis), {"dz": dz}
    loss = -xp.sum(terms)  # (one full sum: NumPy reduces short rows one at a time)
    if reduction == "sum":
        return loss, {"dz_unit": dz}
    n = _mean_rows(terms.shape, axis)
    if not n:  # sizes unknown or no rows: the mean's own NaN and warning
        return xp.mean(-xp.sum(terms, axis=axis)), {"dz": dz}
    if own:  # (a fresh real floating buffer of this function's)
        dz /= n
    else:
        dz = dz / n
    return loss / n, {"dz_unit": dz}


softmax_cross_entropy = Primitive(_ce_forward, name="_softmax_cross_entropy", fresh=True)
"""``-sum(t * log_softmax(z))`` along ``axis`` (``t``: probabilities), then its mean or sum over
the rows (``reduction="mean" | "sum"``); recorded, the node keeps the gradient the forward
computes anyway, so the VJP is one product."""
softmax_cross_entropy.defvjp(_ew.ce_logits_vjp, _ew.ce_targets_vjp).defjvp(_ew.ce_jvp)
softmax_cross_entropy.defresiduals(_ce_forward_and_dz)


# ----- normalization, pooling, linear ----------------------------------------------------------
def _layer_norm_forward(xp, x, w, b, *, axes, eps):
    return _layer_norm(xp, x, w, b, axes, eps)[0]


def _layer_norm_and_parts(xp, x, w, b, *, axes, eps):
    y, parts = _layer_norm(xp, x, w, b, axes, eps)
    return y, {"parts": parts}


layer_norm = Primitive(_layer_norm_forward, name="_layer_norm", fresh=True)
"""Normalize over ``axes``, scale by ``w`` and shift by ``b`` (either may be None); recorded,
the node keeps the normalized input and the square roots for its VJP."""
layer_norm.defvjp_all(layer_norm_vjp).defresiduals(_layer_norm_and_parts)

max_pool_tiles = Primitive(_max_pool_tiles, name="_max_pool_tiles")
"""The maxima of windows tiling the last ``len(kernel)`` axes; the gradient goes to each
window's first maximal element (row-major, as PyTorch)."""
max_pool_tiles.defvjp(max_pool_tiles_vjp)


def _linear_forward(xp, x, w, b, *, relu=False):
    check_linear(x, w, b, relu, _complex_dtypes(xp))
    y = xp.matmul(x, xp.matrix_transpose(w))
    if b is not None:
        y = y + b
    return _relu(xp, y) if relu else y


def _linear_kernel(xp: Any):
    """NumPy's (ufunc backends'): the bias and the ReLU written into the product's buffer."""
    return getattr(xp, "_linear", None)


linear = Primitive(_linear_forward, name="_linear", bound="compute", specialize=_linear_kernel, fresh=True)
"""``act(x @ w^T + b)``, ``w`` of shape ``(out, in)``, ``b`` None or ``(out,)``, ``act`` the ReLU
where ``relu=True``: one node whose VJP computes the three gradients together."""
linear.defvjp_all(linear_vjp).defjvp(linear_jvp)
