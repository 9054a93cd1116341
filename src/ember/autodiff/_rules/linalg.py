"""VJPs of the ``linalg`` extension (compute-bound), registered as ``"linalg.<name>"``.

Every rule is written with the wrapper namespace ``ns``, so it is recorded by
any outer trace and can be differentiated again (reverse-over-reverse,
forward-over-reverse through :mod:`ember.func`).

Complex inputs follow PyTorch's convention (conjugate Wirtinger): the
cotangent of ``z = a + ib`` for a real loss ``L`` is ``dL/da + i dL/db``; for a
C-linear derivative ``dy = J dz`` the VJP is ``J^H g``. See
:data:`COMPLEX_CONVENTION`.

Where a function is not differentiable, or only in a restricted sense:

=================  ===========================================================
cholesky, eigh     input assumed Hermitian; the cotangent returned is the
                   Hermitian part (what any symmetric parametrization sees).
eigh               eigenvectors are unique only up to sign/rotation within an
                   eigenspace. Pairs with *exactly* equal eigenvalues get a
                   zero coupling term (instead of 1/0): correct for losses
                   that do not depend on the choice of basis inside a
                   degenerate eigenspace, arbitrary otherwise. Near-degenerate
                   pairs give large gradients (1 / gap), as in every library.
eigvalsh           ``V diag(g) V^H``: well defined when ``g`` is equal within
                   each group of equal eigenvalues (e.g. sum, trace, logdet).
svd, svdvals       same caveat for equal singular values (zero coupling), and
                   for zero singular values when the matrix is not square.
                   With ``full_matrices=True`` and m != n, the columns of U
                   (rows of Vh) beyond min(m, n) are not unique: their
                   cotangents are ignored. Real inputs only.
qr                 real inputs; ``mode="complete"`` with m > n is not
                   differentiable (Q's extra columns are not unique).
pinv               derivative of the Moore-Penrose inverse at constant rank;
                   the rank is decided by ``rtol`` and is not differentiable.
matrix_norm        ord=2/-2/'nuc' through the SVD; ord=1/-1/inf/-inf: ties
                   between columns (rows) split the gradient equally; at the
                   zero matrix the Frobenius gradient is 0.
vector_norm        ord=0 counts nonzeros: zero gradient. At x == 0 the
                   gradient is 0 (ord=2 and any p >= 1: the subgradient of
                   smallest norm; p < 1: 0 by convention, as PyTorch).
                   ord=+-inf: ties split the gradient equally.
matrix_rank        integer result: no gradient.
eig, eigvals       no rule yet (their results are constants).
=================  ===========================================================
"""

from __future__ import annotations

import math

from ..._errors import NotDifferentiableError
from ._base import defvjp, defvjp_all
from ._util import abs_slope, expand_reduced, fit, norm_axes

#: Convention for complex cotangents: "pytorch" (conjugate Wirtinger,
#: ``dL/da + i dL/db``). Rules here and in :mod:`.fft` are written in it.
COMPLEX_CONVENTION = "pytorch"

COMPLEX_UNSUPPORTED = (
    "{op}: the gradient for complex inputs is not implemented (dtype {dtype}). "
    "Fix: differentiate a real formulation (e.g. split real and imaginary parts)"
)
QR_COMPLETE = (
    "linalg.qr: mode='complete' is not differentiable for a tall matrix of shape {shape} "
    "(the extra columns of Q are not unique). Fix: use mode='reduced'"
)


# --------------------------------------------------------------------------- helpers
def _cplx(ns, x) -> bool:
    return ns.isdtype(x.dtype, "complex floating")


def _conj(ns, x):
    return ns.conj(x) if _cplx(ns, x) else x


def _H(ns, x):
    """Conjugate transpose of the last two axes."""
    return _conj(ns, ns.matrix_transpose(x))


def _real_only(ns, op, x):
    if _cplx(ns, x):
        raise NotDifferentiableError(COMPLEX_UNSUPPORTED.format(op=op, dtype=x.dtype))


def _eye(ns, n, like, k=0, m=None):
    return ns.eye(n, m, k=k, dtype=like.dtype, device=like.device)


def _row(ns, v):
    """(..., n) -> (..., 1, n) (reshape: indexing with None is not differentiable everywhere)."""
    return ns.reshape(v, tuple(v.shape[:-1]) + (1, v.shape[-1]))


def _col(ns, v):
    """(..., n) -> (..., n, 1)."""
    return ns.reshape(v, tuple(v.shape) + (1,))


def _mat(ns, v):
    """(...) -> (..., 1, 1)."""
    return ns.reshape(v, tuple(v.shape) + (1, 1))


def _diag_embed(ns, v):
    """Batched diagonal matrices from vectors (..., n) -> (..., n, n)."""
    n = v.shape[-1]
    return _col(ns, v) * _eye(ns, n, v)


def _herm(ns, x):
    return (x + _H(ns, x)) * 0.5


def _rsolve(ns, b, a):
    """``b @ inv(a)`` via a solve (right division)."""
    return _H(ns, ns.linalg.solve(_H(ns, a), _H(ns, b)))


def _safe_inv_gap(ns, gap):
    """1 / gap, with 0 where gap == 0 (documented degenerate-pair convention)."""
    zero = gap == 0
    return ns.where(zero, 0 * gap, 1 / ns.where(zero, 1 + 0 * gap, gap))


# --------------------------------------------------------------------------- factorizations
def _cholesky(ns, g, ans, x, *, upper=False):
    L = _H(ns, ans) if upper else ans
    gL = _H(ns, g) if upper else g
    # S = Hermitian part of phi(L^H gL), phi = lower triangle with a halved diagonal
    P = ns.tril(ns.matmul(_H(ns, L), gL))
    P = (P + _H(ns, ns.tril(P, k=-1))) * 0.5
    gA = ns.linalg.solve(_H(ns, L), P)
    gA = _rsolve(ns, gA, L)
    return _herm(ns, gA)


def _inv(ns, g, ans, x):
    ah = _H(ns, ans)
    return -ns.matmul(ns.matmul(ah, g), ah)


def _det(ns, g, ans, x):
    # d det = det * tr(A^-1 dA)  ->  ct = conj(g^* det) A^-H = g conj(det) A^-H
    inv_h = _H(ns, ns.linalg.inv(x))
    return _mat(ns, g * _conj(ns, ans)) * inv_h


def _slogdet(ns, g, ans, args, params, parents):
    (x,) = args
    sign, logabs = ans
    gs, gl = g
    inv_h = _H(ns, ns.linalg.inv(x))
    coef = ns.astype(gl, x.dtype) if _cplx(ns, x) else gl
    if _cplx(ns, x):
        coef = coef - 1j * ns.astype(ns.imag(ns.conj(gs) * sign), x.dtype)
    return [_mat(ns, coef) * inv_h]


def _solve_b(ns, g, x, b):
    ah = _H(ns, x)
    if b.ndim == 1:
        gb = ns.linalg.solve(ah, _col(ns, g))
        gb = ns.reshape(gb, tuple(gb.shape[:-1]))
    else:
        gb = ns.linalg.solve(ah, g)
    return gb


def _solve_x1(ns, g, ans, x, b):
    gb = _solve_b(ns, g, x, b)
    if b.ndim == 1:
        ga = -_col(ns, gb) * _row(ns, _conj(ns, ans))
    else:
        ga = -ns.matmul(gb, _H(ns, ans))
    return fit(ns, ga, x)


def _solve_x2(ns, g, ans, x, b):
    return fit(ns, _solve_b(ns, g, x, b), b)


def _pinv(ns, g, ans, x, **params):
    P = ans
    Ph = _H(ns, P)
    gh = _H(ns, g)
    m, n = x.shape[-2], x.shape[-1]
    t1 = -ns.matmul(ns.matmul(Ph, g), Ph)
    left = _eye(ns, m, x) - ns.matmul(x, P)  # I - A A+ (m x m)
    right = _eye(ns, n, x) - ns.matmul(P, x)  # I - A+ A (n x n)
    t2 = ns.matmul(ns.matmul(left, gh), ns.matmul(P, Ph))
    t3 = ns.matmul(ns.matmul(Ph, P), ns.matmul(gh, right))
    return t1 + t2 + t3


def _qr_tall(ns, Q, R, gQ, gR):
    """Cotangent of A = QR for m >= n (reduced), real."""
    M = ns.matmul(R, ns.matrix_transpose(gR)) - ns.matmul(ns.matrix_transpose(gQ), Q)
    low = ns.tril(M, k=-1)
    copyltu = low + ns.matrix_transpose(low) + _diag_embed(ns, ns.linalg.diagonal(M))
    b = gQ + ns.matmul(Q, copyltu)
    return _rsolve(ns, b, ns.matrix_transpose(R))


def _qr(ns, g, ans, args, params, parents):
    (x,) = args
    _real_only(ns, "linalg.qr", x)
    Q, R = ans
    gQ, gR = g
    m, n = x.shape[-2], x.shape[-1]
    if params.get("mode", "reduced") == "complete" and m > n:
        raise NotDifferentiableError(QR_COMPLETE.format(shape=tuple(x.shape)))
    if m >= n:
        return [_qr_tall(ns, Q, R, gQ, gR)]
    # wide: A = [X | Y], X = Q R1 (square), Y = Q R2 (R2 itself is not needed)
    R1 = R[..., :, :m]
    gR1, gR2 = gR[..., :, :m], gR[..., :, m:]
    Y = x[..., :, m:]
    gQ2 = gQ + ns.matmul(Y, ns.matrix_transpose(gR2))
    gX = _qr_tall(ns, Q, R1, gQ2, gR1)
    gY = ns.matmul(Q, gR2)
    return [ns.concat([gX, gY], axis=-1)]


def _svd_core(ns, U, S, Vh, gU, gS, gVh, x):
    """Cotangent of reduced A = U diag(S) Vh (real); gU/gVh may be None."""
    m, n = x.shape[-2], x.shape[-1]
    k = S.shape[-1]
    core = _diag_embed(ns, gS) if gS is not None else 0 * _diag_embed(ns, S)
    s2 = S * S
    F = _safe_inv_gap(ns, _row(ns, s2) - _col(ns, s2))  # F_ij = 1/(s_j^2 - s_i^2)
    V = ns.matrix_transpose(Vh)
    extra = None
    if gU is not None:
        UtgU = ns.matmul(ns.matrix_transpose(U), gU)
        J = F * (UtgU - ns.matrix_transpose(UtgU))
        core = core + J * _row(ns, S)
        if m > k:
            proj = gU - ns.matmul(U, UtgU)
            extra = ns.matmul(proj / _row(ns, _nonzero(ns, S)), Vh)
    if gVh is not None:
        gV = ns.matrix_transpose(gVh)
        VtgV = ns.matmul(Vh, gV)
        K = F * (VtgV - ns.matrix_transpose(VtgV))
        core = core + _col(ns, S) * K
        if n > k:
            proj = gV - ns.matmul(V, VtgV)
            e2 = ns.matmul(U / _row(ns, _nonzero(ns, S)), ns.matrix_transpose(proj))
            extra = e2 if extra is None else extra + e2
    out = ns.matmul(ns.matmul(U, core), Vh)
    return out if extra is None else out + extra


def _nonzero(ns, s):
    return ns.where(s == 0, 1 + 0 * s, s)


def _svd(ns, g, ans, args, params, parents):
    (x,) = args
    _real_only(ns, "linalg.svd", x)
    U, S, Vh = ans
    gU, gS, gVh = g
    k = S.shape[-1]
    if U.shape[-1] != k:  # full_matrices with m != n: keep the unique part
        U, gU = U[..., :, :k], gU[..., :, :k]
    if Vh.shape[-2] != k:
        Vh, gVh = Vh[..., :k, :], gVh[..., :k, :]
    return [_svd_core(ns, U, S, Vh, gU, gS, gVh, x)]


def _svdvals(ns, g, ans, x):
    _real_only(ns, "linalg.svdvals", x)
    U, _, Vh = ns.linalg.svd(x, full_matrices=False)
    return ns.matmul(U * _row(ns, g), Vh)


def _eigh(ns, g, ans, args, params, parents):
    (x,) = args
    _real_only(ns, "linalg.eigh", x)
    w, V = ans
    gw, gV = g
    F = _safe_inv_gap(ns, _row(ns, w) - _col(ns, w))  # 1/(w_j - w_i)
    inner = _diag_embed(ns, gw) + F * ns.matmul(ns.matrix_transpose(V), gV)
    gA = ns.matmul(ns.matmul(V, inner), ns.matrix_transpose(V))
    return [_herm(ns, gA)]


def _eigvalsh(ns, g, ans, x, **params):
    _real_only(ns, "linalg.eigvalsh", x)
    _, V = ns.linalg.eigh(x)
    return _herm(ns, ns.matmul(V * _row(ns, g), ns.matrix_transpose(V)))


# --------------------------------------------------------------------------- norms
def _sign(ns, x):
    """d|x|/dx in the PyTorch convention: sign(x) (x/|x| for complex, 0 at 0)."""
    return abs_slope(ns, x)


def _split_ties(ns, vals, target, axis):
    """Weights 1/count on the entries of ``vals`` equal to ``target`` along ``axis``."""
    mask = ns.astype(vals == target, vals.dtype)
    return mask / ns.sum(mask, axis=axis, keepdims=True)


def _matrix_norm(ns, g, ans, x, *, keepdims=False, ord="fro"):
    if keepdims:
        g, ans = ns.reshape(g, tuple(g.shape[:-2])), ns.reshape(ans, tuple(ans.shape[:-2]))
    gg = _mat(ns, g)
    if ord == "fro":
        safe = ns.where(ans == 0, 1 + 0 * ans, ans)
        return gg * x / _mat(ns, safe)
    if ord == "nuc" or ord in (2, -2):
        _real_only(ns, f"linalg.matrix_norm(ord={ord!r})", x)
        U, S, Vh = ns.linalg.svd(x, full_matrices=False)
        if ord == "nuc":
            w = ns.ones_like(S)
        else:  # S is sorted descending; ties with the extreme value split the gradient
            w = _split_ties(ns, S, S[..., :1] if ord == 2 else S[..., -1:], -1)
        return gg * ns.matmul(U * _row(ns, w), Vh)
    if ord in (1, -1, math.inf, -math.inf):
        sums_axis = -2 if ord in (1, -1) else -1
        sums = ns.sum(ns.abs(x), axis=sums_axis)
        ext = ns.max if ord in (1, math.inf) else ns.min
        w = _split_ties(ns, sums, ext(sums, axis=-1, keepdims=True), -1)
        w = _row(ns, w) if sums_axis == -2 else _col(ns, w)
        return gg * w * _sign(ns, x)
    raise NotDifferentiableError(f"linalg.matrix_norm: no gradient for ord={ord!r}")


def _vector_norm(ns, g, ans, x, *, axis=None, keepdims=False, ord=2):
    if x.ndim == 0:
        axes = ()
    else:
        axes = norm_axes(axis, x.ndim)
    if axis is None and not keepdims:
        g = ns.reshape(g, (1,) * x.ndim)
        a = ns.reshape(ans, (1,) * x.ndim)
    else:
        g = expand_reduced(ns, g, x, axes, keepdims)
        a = expand_reduced(ns, ans, x, axes, keepdims)
    if ord == 0:
        return ns.zeros_like(x)
    ax = axes if axes else None
    if ord in (math.inf, -math.inf):
        absx = ns.abs(x)
        w = ns.astype(absx == a, absx.dtype)
        w = w / ns.sum(w, axis=ax, keepdims=True) if axes else w
        return g * w * _sign(ns, x)
    safe = ns.where(a == 0, 1 + 0 * a, a)
    if ord == 2:
        return g * x / safe
    if ord == 1:
        return g * _sign(ns, x)
    p = float(ord)
    absx = ns.abs(x)
    nz = absx != 0
    absx_safe = ns.where(nz, absx, 1 + 0 * absx)
    ratio = ns.where(nz, ns.pow(absx_safe / safe, p - 1), 0 * absx)
    res = g * ratio * _sign(ns, x)
    return ns.where(a == 0, 0 * res, res)


# --------------------------------------------------------------------------- the rest
def _matrix_power_vjp(ns, g, x, n):
    xh = _H(ns, x)
    powers = [None] * n  # powers[k] = (X^H)^k; None stands for the identity
    if n >= 2:
        powers[1] = xh
    for k in range(2, n):
        powers[k] = ns.matmul(powers[k - 1], xh)
    total = None
    for k in range(n):
        left = powers[k]
        right = powers[n - 1 - k]
        term = g
        if left is not None:
            term = ns.matmul(left, term)
        if right is not None:
            term = ns.matmul(term, right)
        total = term if total is None else total + term
    return total


def _matrix_power(ns, g, ans, x, n):
    if n == 0:
        return ns.zeros_like(x)
    if n > 0:
        return _matrix_power_vjp(ns, g, x, n)
    b = ns.linalg.inv(x)
    gb = _matrix_power_vjp(ns, g, b, -n)
    bh = _H(ns, b)
    return -ns.matmul(ns.matmul(bh, gb), bh)


def _cross_1(ns, g, ans, x1, x2, *, axis=-1):
    return fit(ns, ns.linalg.cross(_conj(ns, x2), g, axis=axis), x1)


def _cross_2(ns, g, ans, x1, x2, *, axis=-1):
    return fit(ns, ns.linalg.cross(g, _conj(ns, x1), axis=axis), x2)


def _trace(ns, g, ans, x, *, offset=0, dtype=None):
    e = _eye(ns, x.shape[-2], x, k=offset, m=x.shape[-1])
    res = _mat(ns, g) * e
    return ns.astype(res, x.dtype) if res.dtype != x.dtype else res


def _diagonal(ns, g, ans, x, *, offset=0):
    n, m = x.shape[-2], x.shape[-1]
    e = _eye(ns, n, x, k=offset, m=m)
    size = n if offset >= 0 else m
    length = g.shape[-1]
    if length < size:
        pad = ns.zeros(tuple(g.shape[:-1]) + (size - length,), dtype=g.dtype, device=g.device)
        g = ns.concat([g, pad], axis=-1)
    elif length > size:
        g = g[..., :size]
    if offset >= 0:
        return _col(ns, g) * e
    return _row(ns, g) * e


defvjp("linalg.cholesky", _cholesky)
defvjp("linalg.inv", _inv)
defvjp("linalg.det", _det)
defvjp_all("linalg.slogdet", _slogdet, nout=2)
defvjp("linalg.solve", _solve_x1, _solve_x2)
defvjp("linalg.pinv", _pinv)
defvjp_all("linalg.qr", _qr, nout=2)
defvjp_all("linalg.svd", _svd, nout=3)
defvjp("linalg.svdvals", _svdvals)
defvjp_all("linalg.eigh", _eigh, nout=2)
defvjp("linalg.eigvalsh", _eigvalsh)
defvjp("linalg.matrix_norm", _matrix_norm)
defvjp("linalg.vector_norm", _vector_norm)
defvjp("linalg.matrix_power", _matrix_power, None)
defvjp("linalg.cross", _cross_1, _cross_2)
defvjp("linalg.outer", lambda ns, g, ans, a, b: ns.matmul(g, _conj(ns, b)),
       lambda ns, g, ans, a, b: ns.matmul(_conj(ns, a), g))
defvjp("linalg.trace", _trace)
defvjp("linalg.diagonal", _diagonal)
