"""VJPs of elementwise functions (all memory-bound).

Complex numbers follow PyTorch's convention: the gradient of a real loss
``L`` with respect to ``z = a + ib`` is ``dL/da + i dL/db`` (twice the
conjugate Wirtinger derivative), so gradient descent works unchanged on
complex parameters. For a holomorphic ``f`` the VJP is ``g * conj(f'(z))``;
``real``/``imag``/``abs``/``conj`` follow from the definition (e.g.
``grad |z|^2 = 2z``, ``grad imag(z) = 1j``). The conjugation is decided once
per call from the dtype in Python (``_util.cj``), so real dtypes pay no
extra array op. A complex cotangent reaching a real input keeps its real part.

Subgradients at non-differentiable points, chosen to match PyTorch and JAX:

============  =============================================================
abs(x)        sign(x): 0 at x == 0 (both +0.0 and -0.0); complex: x / |x| as differentiable ops
maximum/min   ties split the gradient equally between both inputs
pow(x, y)     d/dx is 0 where y == 0; d/dy is 0 where x == 0
hypot         0 where both inputs are 0
copysign      d/dx1 = +-1 as the signs agree; d/dx2 = 0
remainder     d/dx1 = 1, d/dx2 = -floor(x1 / x2)
clip          the gradient goes to x where lo <= x <= hi (bounds included),
              to a bound only where x is strictly beyond it
where         the cotangent goes to the selected branch only; the other gets
              exactly 0, also where the cotangent is inf or NaN (as JAX and
              PyTorch do); likewise maximum/minimum's loser and clip
relu          (``nn.relu``, the ``_relu`` primitive) 0 at x == 0
============  =============================================================

ceil, floor, round, trunc, sign, floor_divide, nextafter, comparisons and
bitwise/logical functions have no rule: their results are constants, so a
gradient through them is zero (``sign`` included, also for complex inputs).
"""

from __future__ import annotations

import cmath
import math

from ...kernels import GELU_C, GELU_K, gelu_tanh_w, in_place, max_last, neg_logistic
from ._base import RULES, defvjp
from ._util import abs_slope, cj, count, expand_reduced, fit, mask_product, products_exact, run_time_kernel, select
from ._util import reduce_last, staged_only

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


def _holo(name, deriv, real, of_ans):
    """Per-argument VJP of a holomorphic unary function: ``g * conj(deriv)``.

    ``deriv`` (the derivative) and ``real`` (the whole VJP for real dtypes) are
    expressions in ``ns``, ``g``, ``ans`` and ``x``. Why the two and why
    compiled: these are the most frequent VJPs, and the real form folds the
    product with ``g`` into the derivative (``g / x``, not ``g * (1 / x)``)
    without Python scalars (NumPy converts one per call, as slow as the op)
    in one Python frame per node. ``of_ans``: the derivative reads ``ans``
    only (``x`` is then not kept), so the dtype test reads ``ans``.
    """
    v = "ans" if of_ans else "x"
    src = (f"def {name}_vjp(ns, g, ans, x):\n"
           f"    if {v}.dtype in ns._complex:\n"
           f"        return g * ns.conj({deriv})\n"
           f"    return {real}\n")
    scope = {"_LN2": _LN2, "_LN10": _LN10}
    exec(compile(src, f"<ember: VJP of {name}>", "exec"), scope)
    return scope[f"{name}_vjp"]


# ----- unary -------------------------------------------------------------
# per holomorphic unary function: its derivative, and its VJP for real dtypes (equal to
# g * derivative up to rounding), as expressions in ns, g, ans and x
_UNARY = {
    "acos": ("-1 / ns.sqrt(1 - x * x)", "-(g / ns.sqrt(1 - x * x))"),
    "acosh": ("1 / ns.sqrt(x * x - 1)", "g / ns.sqrt(x * x - 1)"),
    "asin": ("1 / ns.sqrt(1 - x * x)", "g / ns.sqrt(1 - x * x)"),
    "asinh": ("1 / ns.sqrt(x * x + 1)", "g / ns.sqrt(x * x + 1)"),
    "atan": ("1 / (1 + x * x)", "g / (x * x + 1)"),
    "atanh": ("1 / (1 - x * x)", "g / (1 - x * x)"),
    "cos": ("-ns.sin(x)", "-(g * ns.sin(x))"),
    "cosh": ("ns.sinh(x)", "g * ns.sinh(x)"),
    "exp": ("ans", "g * ans"),
    "expm1": ("ans + 1", "g * ans + g"),
    "log": ("1 / x", "g / x"),
    "log1p": ("1 / (x + 1)", "g / (x + 1)"),
    "log2": ("1 / (x * _LN2)", "g / (x * _LN2)"),
    "log10": ("1 / (x * _LN10)", "g / (x * _LN10)"),
    "sin": ("ns.cos(x)", "g * ns.cos(x)"),
    "sinh": ("ns.cosh(x)", "g * ns.cosh(x)"),
    "sqrt": ("0.5 / ans", "g / (ans + ans)"),
    "square": ("2 * x", "g * (x + x)"),
    "tan": ("1 + ans * ans", "g * ans * ans + g"),
    "tanh": ("1 - ans * ans", "g - g * ans * ans"),
    "reciprocal": ("-(ans * ans)", "-(g * ans * ans)"),
}
# the derivatives above that read only ``ans`` (the rest read only ``x``): what the tape keeps
_OF_ANS = frozenset({"exp", "expm1", "sqrt", "tan", "tanh", "reciprocal"})
for _name, (_deriv, _real) in _UNARY.items():
    if _name in _OF_ANS:
        defvjp(_name, _holo(_name, _deriv, _real, True), saves=("none",))
    else:
        defvjp(_name, _holo(_name, _deriv, _real, False), keep_ans=False)

defvjp("abs", lambda ns, g, ans, x: g * abs_slope(ns, x), keep_ans=False)  # complex: g * z / |z|
defvjp("negative", lambda ns, g, ans, x: -g, saves=("none",), keep_ans=False)
defvjp("positive", lambda ns, g, ans, x: g, saves=("none",), keep_ans=False)
defvjp("conj", lambda ns, g, ans, x: ns.conj(g), saves=("none",), keep_ans=False)
defvjp("real", lambda ns, g, ans, x: fit(ns, g, x), saves=("spec",), keep_ans=False)
defvjp("imag", lambda ns, g, ans, x: (
    ns.astype(g, x.dtype) * 1j if ns.isdtype(x.dtype, "complex floating") else ns.zeros_like(x)
))


# ----- binary ------------------------------------------------------------
def _ties(ns, mine, other, g, larger):
    """Cotangent of ``mine`` in maximum (larger=True) / minimum: ties split in half.

    On CPU (``ns._cheap_any``) it is ``g * win`` (the bool mask as it is, see
    ``mask_product``), or ``g * (win + tie / 2)`` with the masks cast to g's
    dtype where a tie exists: products stream, where ``where`` on an
    unpredictable mask (a ReLU's) branches per element and runs 4-15x slower.
    Ties are rare (a ReLU of a matmul has none). A cotangent with an inf or NaN
    (which a zero weight would turn into NaN) takes the exact selection, which
    other backends use always.
    """
    if staged_only(ns, mine, other, g):  # (jit: one op, deciding on each call's values)
        return ns._dispatch.call("_ties", run_time_kernel(ns._dispatch, "_ties", _ties_kernel),
                                 (mine, other, g), {"larger": larger})
    return _split_ties(ns, mine, other, g, larger, products_exact(ns, g))


def _split_ties(ns, mine, other, g, larger, exact):
    """:func:`_ties`' cotangent, by the product where ``exact`` (g all finite) else ``where``."""
    win = (mine > other) if larger else (mine < other)
    tie = mine == other
    if exact:
        if not bool(ns.any(tie)):
            return mask_product(ns, g, win)
        dt = g.dtype
        return g * (ns.astype(win, dt) + ns.astype(tie, dt) * 0.5)
    return ns.where(win, g, ns.where(tie, g * 0.5, ns.zeros_like(g)))


def _ties_kernel(R):
    """:func:`_ties` on backend arrays, as one function (the same steps, chosen per call)."""
    def k(mine, other, g, larger):
        return _split_ties(R, mine, other, g, larger, bool(R.all(R.isfinite(g))))

    return k


def _pow_dx(ns, g, ans, x, y):
    if isinstance(y, (bool, int, float, complex)):
        if y == 0:
            return ns.zeros_like(x)
        # (a square's x^1 is x exactly: one op less, eagerly and in a jitted graph)
        d = y * (x if y == 2 and y.__class__ is not complex else ns.pow(x, y - 1))
    else:
        # 0 where y == 0, as y * x^(y-1) with x^(y-1) kept finite (x set to 1 where it is 0,
        # inf or NaN) rather than a constant 0: its derivative in y, x^(y-1), is what a second
        # derivative needs
        odd = (y == 0) & ((x == 0) | ns.logical_not(ns.isfinite(x)))
        d = y * ns.pow(ns.where(odd, ns.ones_like(x), x), y - 1)
    return fit(ns, g * cj(ns, d), x)


def _scalar_log(x):
    if isinstance(x, complex) or x < 0:
        return cmath.log(x) if isinstance(x, complex) else math.nan
    return math.log(x)


def _pow_dy(ns, g, ans, x, y):
    if isinstance(x, (bool, int, float, complex)):
        d = ans * _scalar_log(x) if x != 0 else 0 * ans
    else:
        d = ns.where(x == 0, 0 * ans, ans * ns.log(ns.where(x == 0, 1, x)))
    return fit(ns, g * cj(ns, d), y)


def _hypot(ns, g, ans, xi):
    safe = ns.where(ans == 0, 1, ans)
    return g * ns.where(ans == 0, 0 * ans, xi / safe)


# add / subtract / multiply are the hottest VJPs: the common case (no broadcasting, same
# dtype, a Python scalar factor) is decided inline; `fit` and `cj` do the rest
def _add_dx(ns, g, ans, x, y):
    return g if g.shape == x.shape and g.dtype == x.dtype else fit(ns, g, x)


def _add_dy(ns, g, ans, x, y):
    return g if g.shape == y.shape and g.dtype == y.dtype else fit(ns, g, y)


def _sub_dy(ns, g, ans, x, y):
    return -g if g.shape == y.shape and g.dtype == y.dtype else -fit(ns, g, y)


def _mul_dx(ns, g, ans, x, y):
    c = y.__class__
    r = g * (y if c is float or c is int else cj(ns, y))
    return r if r.shape == x.shape and r.dtype == x.dtype else fit(ns, r, x)


def _mul_dy(ns, g, ans, x, y):
    c = x.__class__
    r = g * (x if c is float or c is int else cj(ns, x))
    return r if r.shape == y.shape and r.dtype == y.dtype else fit(ns, r, y)


# (the tape keeps no array of a sum, and of a product only the factor another input needs)
defvjp("add", _add_dx, _add_dy, saves=("spec", "spec"), keep_ans=False)
defvjp("subtract", _add_dx, _sub_dy, saves=("spec", "spec"), keep_ans=False)
defvjp("multiply", _mul_dx, _mul_dy, saves=("other", "other"), keep_ans=False)
defvjp(
    "divide",
    lambda ns, g, ans, x, y: fit(ns, g / cj(ns, y), x),
    lambda ns, g, ans, x, y: fit(ns, -g * cj(ns, ans / y), y),
    saves=("spec", "value"),
)
defvjp("pow", _pow_dx, _pow_dy)
defvjp(
    "atan2",
    lambda ns, g, ans, x1, x2: fit(ns, g * x2 / (x1 * x1 + x2 * x2), x1),
    lambda ns, g, ans, x1, x2: fit(ns, -g * x1 / (x1 * x1 + x2 * x2), x2),
)
defvjp(
    "hypot",
    lambda ns, g, ans, x1, x2: fit(ns, _hypot(ns, g, ans, x1), x1),
    lambda ns, g, ans, x1, x2: fit(ns, _hypot(ns, g, ans, x2), x2),
)
defvjp(
    "logaddexp",
    lambda ns, g, ans, x1, x2: fit(ns, g * ns.exp(x1 - ans), x1),
    lambda ns, g, ans, x1, x2: fit(ns, g * ns.exp(x2 - ans), x2),
)
defvjp(
    "maximum",
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x1, x2, g, True), x1),
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x2, x1, g, True), x2),
)
defvjp(
    "minimum",
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x1, x2, g, False), x1),
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x2, x1, g, False), x2),
)
defvjp(
    "copysign",
    lambda ns, g, ans, x1, x2: fit(ns, ns.where(ns.signbit(x1) == ns.signbit(ans), g, -g), x1),
    None,
)
defvjp(
    "remainder",
    lambda ns, g, ans, x1, x2: fit(ns, g, x1),
    lambda ns, g, ans, x1, x2: fit(ns, -g * ns.floor(x1 / x2), x2),
)


# ----- where / clip / astype / copy ---------------------------------------
defvjp(
    "where",
    None,
    lambda ns, g, ans, c, x1, x2: fit(ns, select(ns, c, g), x1),
    lambda ns, g, ans, c, x1, x2: fit(ns, select(ns, ns.logical_not(c), g), x2),
)


def _where_zeros(ns, g, zmask, args, params):
    """x1's cotangent is zero where ``c`` is False, x2's where it is True (plus the output's
    own known zeros): a NaN computed on the side ``where`` did not take stays out of the
    gradient."""
    c = ns.broadcast_to(args[0], tuple(g.shape))
    m1, m2 = ns.logical_not(c), c
    if zmask is not None:
        m1, m2 = ns.logical_or(m1, zmask), ns.logical_or(m2, zmask)
    return [None, m1, m2]


RULES["where"].zero_masks = _where_zeros


def _clip_x(ns, g, ans, x, lo, hi):
    return fit(ns, select(ns, ans == x, g), x)


def _clip_lo(ns, g, ans, x, lo, hi):
    return fit(ns, select(ns, (x < lo) & (ans == lo), g), lo)


def _clip_hi(ns, g, ans, x, lo, hi):
    return fit(ns, select(ns, (x > hi) & (ans == hi), g), hi)


defvjp("clip", _clip_x, _clip_lo, _clip_hi)
defvjp("astype", lambda ns, g, ans, x, dtype, **kw: fit(ns, g, x))
defvjp("copy", lambda ns, g, ans, x: g)
# nn.relu: max(x, 0) whose derivative at 0 is 0 (PyTorch's and JAX's choice), not maximum's 1/2.
# The mask is read off the result (relu(x) > 0 exactly where x > 0, NaN included), which the
# next op usually keeps anyway: the tape need not keep the pre-activation too
# the rules' masked cotangent as one op whose product-or-where choice is made when it runs
# (_util.select, under jit and vmap); linear in g, the mask carries no gradient
defvjp("_select", None, lambda ns, gg, ans, c, g: select(ns, c, gg))


def relu_vjp(ns, g, ans, x):
    return select(ns, ans > 0, g)


# nn.erf (one primitive; the forward is a Chebyshev series, see autodiff/_erf.py)
def erf_vjp(ns, g, ans, x):
    return g * (2.0 / math.sqrt(math.pi)) * ns.exp(-(x * x))


def _neg_logistic_kernel(R):
    return lambda w: neg_logistic(R, w)


def gelu_tanh_s(ns, x, x2, spend_x2: bool = False):
    """``s = (1 + tanh(u)) / 2``, GELU's tanh form's factor (GELU is ``x s``), as
    ``neg_logistic(-2u)`` (``kernels.gelu_tanh_w``). On ember's namespace (a rule run on
    Tensors: higher orders, checkpointing) the logistic is one op ``_neg_logistic`` with
    the derivative ``s (s - 1)``: through ``exp``'s own rule, far out, it would be
    ``0 * inf``, NaN. The same kernel computes its value, so the same bits."""
    w = gelu_tanh_w(ns, x, x2, spend_x2)
    d = getattr(ns, "_dispatch", None)
    if d is None:
        return neg_logistic(ns, w)
    return d.call("_neg_logistic", run_time_kernel(d, "_neg_logistic", _neg_logistic_kernel), (w,), {})


defvjp("_neg_logistic", lambda ns, g, ans, w: g * (ans * (ans - 1.0)))


#: d gelu / dx = s + (x (s (1 - s))) (A + B x^2), s = (1 + tanh(u)) / 2: the coefficients
_GELU_A, _GELU_B = 2.0 * GELU_C, 6.0 * GELU_C * GELU_K


def gelu_tanh_vjp(ns, g, ans, x, s=None):
    # GELU = x s, s = sigmoid(2u), u = c (x + k x^3): d/dx = s + 2 x s (1 - s) u', written as
    # s + (x (s (1 - s))) (A + B x^2): nine passes, and (s (1 - s)) x first, so that a large
    # |x| (where s (1 - s) is 0) overflows only once x^2 does. s: the forward's where jit kept
    # it (a residual), else recomputed
    x2 = x * x
    kept = s is not None  # (then never written: a second backward pass reads it again)
    if not kept:
        s = gelu_tanh_s(ns, x, x2)
    if g.dtype != x.dtype or kept or not in_place(ns, x):
        return g * ((x * (s * (1.0 - s))) * (_GELU_A + _GELU_B * x2) + s)
    # the same operations, in place (x2 and s are this function's own)
    d = 1.0 - s
    d *= s
    d *= x
    x2 *= _GELU_B
    x2 += _GELU_A
    d *= x2
    d += s
    d *= g
    return d


# nn.softmax / nn.log_softmax (one primitive each): y = softmax(x), l = log_softmax(x)
def softmax_vjp(ns, g, ans, x, *, axis):
    return ans * (g - reduce_last(ns, g * ans, axis, keepdims=True))


def log_softmax_vjp(ns, g, ans, x, *, axis):
    return g - ns.exp(ans) * reduce_last(ns, g, axis, keepdims=True)


def softmax_jvp(ns, ts, ans, x, *, axis):
    return ans * (ts[0] - ns.sum(ans * ts[0], axis=axis, keepdims=True))


def log_softmax_jvp(ns, ts, ans, x, *, axis):
    return ts[0] - ns.sum(ns.exp(ans) * ts[0], axis=axis, keepdims=True)


def shifted_exp(ns, z, axis):
    """``(z - max z, exp of it, its sum)`` along ``axis``: softmax and log-softmax of logits
    ``z``: the cross-entropy forward's (_wrappers) and its VJPs' where the forward kept no ``dz``."""
    s = z - max_last(ns, z, axis, keepdims=True)
    e = ns.exp(s)
    return s, e, reduce_last(ns, e, axis, keepdims=True)


def ce_dz(ns, t, e, total, axis):
    """``softmax(z) * sum(t) - t`` from ``shifted_exp``'s ``e`` and ``total``: d/dz of the
    per-row loss ``-sum(t * log_softmax(z))`` (the forward keeps it, see _wrappers)."""
    return e * (reduce_last(ns, t, axis, keepdims=True) / total) - t


def _ce_rows(ns, g, z, axis, reduction):
    """The cotangent of each row's loss, shaped to broadcast against ``z``: ``g`` itself
    (reduction "none", an axis put back), or the 0-d ``g`` (sum) or ``g / rows`` (mean)."""
    if reduction == "sum":
        return g
    axis %= z.ndim
    if reduction == "none":  # (expand_reduced: also for sizes the backend computes later)
        return expand_reduced(ns, g, z, axis, False)
    rows = count(ns, z, tuple(i for i in range(z.ndim) if i != axis))  # lazy where unknown
    return g / rows if rows.__class__ is not int or rows else g  # no rows: an empty gradient


def ce_logits_vjp(ns, g, ans, z, t, *, axis, reduction="none", dz=None, dz_unit=None):
    # d/dz of -sum(t * (z - logsumexp(z))) is softmax(z) * sum(t) - t: kept by the forward
    # (``dz`` per row, or ``dz_unit`` for the reduced loss: see _wrappers.softmax_cross_entropy)
    # or recomputed
    if dz_unit is not None:
        gz = g * dz_unit
        return gz if gz.shape == z.shape and gz.dtype == z.dtype else fit(ns, gz, z)
    if dz is None:
        _, e, total = shifted_exp(ns, z, axis)
        dz = ce_dz(ns, t, e, total, axis)
    return fit(ns, _ce_rows(ns, g, z, axis, reduction) * dz, z)


def ce_targets_vjp(ns, g, ans, z, t, *, axis, reduction="none", dz=None, dz_unit=None):
    s, _, total = shifted_exp(ns, z, axis)
    return fit(ns, -_ce_rows(ns, g, z, axis, reduction) * (s - ns.log(total)), t)




def ce_jvp(ns, tangents, ans, z, t, *, axis, reduction="none", **residuals):
    """The loss's tangent: per row ``<dz, tz> - <tt, log_softmax(z)>``, reduced as the loss."""
    tz, tt = tangents
    s, e, total = shifted_exp(ns, z, axis)
    rows = None
    if tz is not None:
        rows = ns.sum(ce_dz(ns, t, e, total, axis) * tz, axis=axis)
    if tt is not None:
        part = -ns.sum(tt * (s - ns.log(total)), axis=axis)
        rows = part if rows is None else rows + part
    if reduction == "sum":
        return ns.sum(rows)
    return ns.mean(rows) if reduction == "mean" else rows


defvjp("_to_device", lambda ns, g, ans, x: g.to_device(x.device), raw=False)  # Tensor.to_device
