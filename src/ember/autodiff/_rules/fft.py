"""VJPs of the ``fft`` extension (compute-bound), registered as ``"fft.<name>"``.

Complex cotangents follow PyTorch's convention (see
:data:`.linalg.COMPLEX_CONVENTION`): for a C-linear transform ``y = F x`` the
VJP is ``F^H g``. The adjoint of a transform with normalization ``norm`` is
the inverse transform with the *dual* normalization (``"backward"`` <->
``"forward"``, ``"ortho"`` stays), so each rule is one FFT of the same size,
followed by undoing the zero-padding / truncation that ``n`` / ``s`` applied.

Real-input transforms (``rfft``, ``rfftn``, ``ihfft``) take the real part of
that adjoint. Real-output transforms (``irfft``, ``irfftn``, ``hfft``) read
only half a Hermitian spectrum: their adjoint is an ``rfft`` whose bins other
than 0 (and n/2 for even n) are doubled, the weight with which each stored
bin appears in the full spectrum. ``fftfreq``/``rfftfreq`` take no array and
have no gradient.
"""

from __future__ import annotations

from ._base import defvjp

_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho", None: "forward"}


def _cplx(ns, x) -> bool:
    return ns.isdtype(x.dtype, "complex floating")


def _resize(ns, g, axis, size):
    """``g`` truncated or zero-padded along ``axis`` to length ``size``."""
    cur = g.shape[axis]
    if cur == size:
        return g
    axis = axis % g.ndim
    if cur > size:
        return g[(slice(None),) * axis + (slice(0, size), ...)]
    shape = list(g.shape)
    shape[axis] = size - cur
    return ns.concat([g, ns.zeros(tuple(shape), dtype=g.dtype, device=g.device)], axis=axis)


def _to(ns, g, x):
    """Cotangent ``g`` in ``x``'s dtype (real part for real inputs)."""
    if _cplx(ns, g) and not _cplx(ns, x):
        g = ns.real(g)
    return ns.astype(g, x.dtype) if g.dtype != x.dtype else g


def _axes(x, s, axes):
    if axes is None:
        if s is None:
            return list(range(x.ndim))
        return list(range(x.ndim - len(s), x.ndim))
    return [a % x.ndim for a in axes]


def _half_weights(ns, g, axis, n):
    """Weights 1, 2, ..., 2, (1 if n even) along ``axis`` of an rfft of length ``n``."""
    m = n // 2 + 1
    w = [2.0] * m
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    real = ns.float32 if g.dtype in (ns.float32, ns.complex64) else ns.float64
    shape = [1] * g.ndim
    shape[axis % g.ndim] = m
    return ns.reshape(ns.asarray(w, dtype=real, device=g.device), tuple(shape))


# ----- complex-to-complex ---------------------------------------------------
def _c2c_1d(inverse):
    def vjp(ns, g, ans, x, *, n=None, axis=-1, norm="backward"):
        adj = ns.fft.fft if inverse else ns.fft.ifft
        r = adj(g, axis=axis, norm=_DUAL[norm])
        return _to(ns, _resize(ns, r, axis, x.shape[axis]), x)

    return vjp


def _c2c_nd(inverse):
    def vjp(ns, g, ans, x, *, s=None, axes=None, norm="backward"):
        adj = ns.fft.fftn if inverse else ns.fft.ifftn
        ax = _axes(x, s, axes)
        r = adj(g, axes=ax, norm=_DUAL[norm])
        for a in ax:
            r = _resize(ns, r, a, x.shape[a])
        return _to(ns, r, x)

    return vjp


# ----- real input -------------------------------------------------------------
def _rfft(ns, g, ans, x, *, n=None, axis=-1, norm="backward"):
    size = x.shape[axis] if n is None else n
    r = ns.fft.ifft(_resize(ns, g, axis, size), axis=axis, norm=_DUAL[norm])
    return _to(ns, _resize(ns, ns.real(r), axis, x.shape[axis]), x)


def _rfftn(ns, g, ans, x, *, s=None, axes=None, norm="backward"):
    ax = _axes(x, s, axes)
    last = ax[-1]
    size = x.shape[last] if s is None else s[-1]
    r = ns.fft.ifftn(_resize(ns, g, last, size), axes=ax, norm=_DUAL[norm])
    r = ns.real(r)
    for a in ax:
        r = _resize(ns, r, a, x.shape[a])
    return _to(ns, r, x)


def _ihfft(ns, g, ans, x, *, n=None, axis=-1, norm="backward"):
    # ihfft(x) = conj(rfft(x, norm=dual)); the conj pulls back as conj
    size = x.shape[axis] if n is None else n
    r = ns.fft.ifft(_resize(ns, ns.conj(g), axis, size), axis=axis, norm=norm)
    return _to(ns, _resize(ns, ns.real(r), axis, x.shape[axis]), x)


# ----- real output ------------------------------------------------------------
def _irfft(ns, g, ans, x, *, n=None, axis=-1, norm="backward"):
    size = g.shape[axis]
    r = ns.fft.rfft(g, axis=axis, norm=_DUAL[norm]) * _half_weights(ns, g, axis, size)
    return _to(ns, _resize(ns, r, axis, x.shape[axis]), x)


def _irfftn(ns, g, ans, x, *, s=None, axes=None, norm="backward"):
    ax = _axes(x, s, axes)
    last = ax[-1]
    r = ns.fft.rfftn(g, axes=ax, norm=_DUAL[norm]) * _half_weights(ns, g, last, g.shape[last])
    for a in ax:
        r = _resize(ns, r, a, x.shape[a])
    return _to(ns, r, x)


def _hfft(ns, g, ans, x, *, n=None, axis=-1, norm="backward"):
    # hfft(x) = irfft(conj(x), norm=dual)
    size = g.shape[axis]
    r = ns.fft.rfft(g, axis=axis, norm=norm) * _half_weights(ns, g, axis, size)
    return _to(ns, _resize(ns, ns.conj(r), axis, x.shape[axis]), x)


# ----- shifts -------------------------------------------------------------------
defvjp("fft.fft", _c2c_1d(False))
defvjp("fft.ifft", _c2c_1d(True))
defvjp("fft.fftn", _c2c_nd(False))
defvjp("fft.ifftn", _c2c_nd(True))
defvjp("fft.rfft", _rfft)
defvjp("fft.rfftn", _rfftn)
defvjp("fft.irfft", _irfft)
defvjp("fft.irfftn", _irfftn)
defvjp("fft.hfft", _hfft)
defvjp("fft.ihfft", _ihfft)
defvjp("fft.fftshift", lambda ns, g, ans, x, *, axes=None: ns.fft.ifftshift(g, axes=axes))
defvjp("fft.ifftshift", lambda ns, g, ans, x, *, axes=None: ns.fft.fftshift(g, axes=axes))
