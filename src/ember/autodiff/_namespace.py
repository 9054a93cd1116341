"""The factory that builds a differentiable, array-API conformant namespace.

``namespace(xp)`` returns a module object wrapping backend ``xp``: every
function, constant and dtype of the standard, the ``linalg`` and ``fft``
extensions, and a Tensor subclass with every operator and method.

Dispatch has two paths. The *fast path* (all array inputs untracked Tensors
of this namespace) calls the backend function and wraps the result: no
Python containers, no tape. The *slow path* (``_Dispatcher.call``) validates
arguments (raw arrays of the same backend become constants, other libraries
and other namespaces are a TypeError), finds the innermost open trace among
the inputs, calls the op one level down and records a node.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import operator
import sys
import threading
import types

from .. import backend as _backend
from .._errors import DTypeError, ShapeError
from . import _api_tables as api
from .._errors import ConsumedError
from ._ownership import Owned, as_operand, claim, fail_claims, run_owned, same_twice
from ..kernels import shapes_fit
from ._direct import direct_functions
from ._numbers import TracedNumber
from ._op_errors import GENERAL as _GENERAL
from ._op_errors import op_error
from ._op_errors import reference_signature as _reference_signature
from ._rules import RULES, SELECT
from ._batching import OPEN as _BATCHING
from ._batching import BatchedArgument, batched_class
from ._batching import dispatch as _batch_dispatch
from ._rules._base import _SPECS, NOT_KEPT, spec_of
from ._tensor import Tensor, mixing_error, raw_value
from ._trace import make_node, active_traces
from ._views import VIEW_FUNCTIONS, basic_key, before_write, note_function_view, note_view, written

__all__ = ["namespace"]

_SCALARS = (bool, int, float, complex)


def _numpy_scalar(x) -> bool:
    """Whether ``x`` is a NumPy scalar (``numpy.generic``), which any backend takes as a 0-d array."""
    np = sys.modules.get("numpy")  # no NumPy imported: no NumPy scalar exists
    return np is not None and isinstance(x, np.generic)


def _array_like(x) -> bool:
    """Whether ``x`` is an array or array scalar (another library's, or a NumPy scalar).

    An operator of a Tensor hands such an operand to its function (which wraps a
    scalar of the backend's own library and rejects other libraries' arrays with
    a clear error) instead of returning NotImplemented: NumPy's reflected method
    would convert the Tensor to a NumPy array and silently drop its gradient.
    """
    return hasattr(x, "__array_namespace__") or hasattr(x, "__dlpack__") or (
        hasattr(x, "__array__") and not isinstance(x, TracedNumber))  # (a number: its own operators)


_NOPARAMS: dict = {}  # shared, never mutated: the params of ops that take none
_NOARG = (NOT_KEPT,)  # the args of a unary node whose VJP reads only its result
_UNSEEN_LOCK = threading.Lock()  # (unseen_values' counts: traces in several threads)


def _keep_only_read(node, saves, raw, parents) -> None:
    """Drop from ``node`` what its VJPs do not read (``Rule.saves``; codes 1: the spec, 2:
    read by the other argument's VJP only, 3: nothing), as the unary and binary fast paths
    do for the standard's ops; the generic one-level path (primitives) calls this."""
    args = list(node.args)
    for i, m in enumerate(saves[:-1]):
        if not m or not hasattr(raw[i], "shape"):  # (kept, or a Python scalar: kept as it is)
            continue
        if m == 2 and (len(parents) != 2 or parents[1 - i] is not None):
            continue  # (the other argument's VJP reads it)
        args[i] = NOT_KEPT if m == 3 else spec_of(raw[i])
    node.args = tuple(args)
    if not saves[-1]:
        node.ans = None


_cache: dict = {}


def namespace(xp, *, name: str | None = None) -> types.ModuleType:
    """Build (or fetch from cache) the differentiable wrapper namespace of ``xp``.

    ``xp`` is anything :func:`ember.backend.get` accepts: a name such as
    ``"numpy"``, a namespace module, or an array.

    >>> import ember.autodiff as ad
    >>> xp = ad.namespace("numpy")
    >>> float(xp.sum(xp.asarray([1.0, 2.0])))
    3.0
    """
    bxp = _backend.get(xp)
    key = id(bxp)
    if key in _cache:
        return _cache[key]
    bname = _backend.name(bxp)
    mod = _Dispatcher(bxp, bname, name or f"ember.autodiff.{bname}").module
    _cache[key] = mod
    return mod


def install(modname: str, backend: str) -> types.ModuleType:
    """Make module ``modname`` the wrapper namespace of ``backend`` (the ready-made modules).

    ``sys.modules`` gets the namespace under ``modname`` and its extensions
    under ``modname.linalg`` / ``modname.fft``, so ``import ember.autodiff.numpy``
    and ``import ember.autodiff.numpy.linalg`` both work (the official suite
    imports namespaces by dotted name).
    """
    import sys

    mod = sys.modules[modname] = namespace(backend, name=modname)
    for ext in ("linalg", "fft"):
        if hasattr(mod, ext):
            sys.modules[f"{modname}.{ext}"] = getattr(mod, ext)
    return mod


class _Dispatcher:
    """Builds one namespace; its methods are the dispatch paths of that namespace."""

    def __init__(self, bxp, bname: str, modname: str):
        self.xp = bxp
        self.bname = bname
        self.floating: dict = {}  # dtype -> can carry a gradient
        mod = self.module = types.ModuleType(modname)
        mod.__doc__ = (
            f"Differentiable array-API namespace over the {bname!r} backend.\n\n"
            "Made by ember.autodiff.namespace; every name of the array API standard "
            "is here, and arrays are ember Tensors."
        )
        mod._backend = bxp
        mod._backend_name = bname
        mod._dispatch = self
        probe = bxp.asarray(0.0)
        self.A = type(probe)
        # the dtypes most results have (identity checks on the unary fast path)
        self.real_floats = (probe.dtype, bxp.asarray(0.0, dtype=bxp.float32).dtype)
        # backend scalars (numpy.float64 from a 0-d op) become 0-d arrays; the library's own
        # asarray does it 10x faster than the compat layer's, which checks copy/device options
        lib = _backend.raw(bxp)
        self.coerce = coerce = getattr(lib, "asarray", bxp.asarray)
        A = self.A

        class T(Tensor):
            __slots__ = ()
            _ns = mod
            # T() makes an empty handle for the fast paths (C-level: faster than
            # object.__new__(T)); users create tensors with xp.asarray, and
            # ember.Tensor(...) itself still raises
            __init__ = object.__init__
            if probe.shape.__class__ is tuple:  # the backend's shapes are tuples already (not
                # torch.Size): read through every level at C level, like dtype
                shape = property(operator.attrgetter("_value.shape"), doc="The size of each axis (a tuple).")

        T.__name__ = T.__qualname__ = "Tensor"
        T.__module__ = "ember"
        self.T = T
        mod._Tensor = T
        # values batched by ember.vmap: a subclass, so no fast path takes them (_batching)
        self.B = mod._Batched = batched_class(T)

        def wrap(v, node=None):
            if v.__class__ is not A:
                v = coerce(v)
            t = T()
            t._value = v
            t._node = node
            return t

        def make(v, node):
            t = T()
            t._value = v
            t._node = node
            return t

        self.wrap = wrap
        self.make = make
        mod._wrap = wrap
        self._claims = []  # consume() markers met by normalize in the current call
        from . import _wrappers

        self.version = _api_version(bxp)
        # corrected elementwise functions, and library kernels called without compat's frames
        self.caps = caps = _backend.capabilities(bxp)
        direct = direct_functions(lib, getattr(bxp, "clip", None)) if caps.ufuncs else {}
        self.fixes = {**direct, **_wrappers.backend_fixes(bxp)}
        self.raw_ns = _raw_namespace(bxp, self.fixes, modname)
        # seeds of backward passes
        self.ones_like = self.fixes.get("_seed_ones_like") or getattr(lib, "ones_like", bxp.ones_like)
        # the complex dtypes, for the rules' conjugation test (_rules/_util.is_complex)
        mod._complex = self.raw_ns._complex = _wrappers._dtype_set(bxp, ("complex64", "complex128"))
        # whether bool(any(mask)) is cheap (eager, host memory: no device sync), so a rule may
        # test for a rare case (ties in maximum) instead of always computing its correction
        mod._cheap_any = self.raw_ns._cheap_any = caps.cheap_checks
        self._unseen = 0  # the unseen_values blocks open now, and (set by the first) the flags
        self._seen = None  # before it
        # the same, fixed: jit and vmap turn ``_cheap_any`` off while they trace, but a choice
        # that depends only on the backend (a stacked product as one GEMM) stays
        mod._eager_host = self.raw_ns._eager_host = caps.cheap_checks
        # whether backend arrays take item assignment and in-place arithmetic (the backward
        # loop accumulates into buffers it owns, see _trace._backward_raw)
        self.raw_ns._writes = caps.in_place
        # the backend array under a plain Tensor (else None), whose memory layout picks a
        # kernel's method (kernels.reductions): rules run on Tensors then pick the method they
        # pick on raw arrays, so checkpointed and higher-order passes give the same bits
        mod._under = _under_plain(T)
        self.raw_ns._under = None
        self._build_functions()
        self._build_tensor_methods()
        self._build_constants()

    # ------------------------------------------------------------------ #
    # argument handling
    # ------------------------------------------------------------------ #
    def strip(self, v):
        """Backend values of ``v`` (Tensors unwrapped at every level, recursively)."""
        if isinstance(v, Tensor):
            self.check_own(v, "op")
            return raw_value(v)
        if isinstance(v, tuple):
            return type(v)(self.strip(a) for a in v) if type(v) is tuple else type(v)(*[self.strip(a) for a in v])
        if isinstance(v, list):
            return [self.strip(a) for a in v]
        return v

    def check_own(self, a, op):
        if a.__class__ is not self.T:
            if a.__class__ is self.B:
                from ._batching import BATCHED_KEY, BatchingError

                raise BatchingError(BATCHED_KEY.format(op=op))
            from ._ownership import check_alive

            check_alive(a, op)
            raise mixing_error(op, a, self.module)

    def wrap_out(self, v):
        """Wrap backend outputs (arrays, tuples, namedtuples) as constant Tensors."""
        A = self.A
        if v.__class__ is A or isinstance(v, A):
            return self.wrap(v)
        if isinstance(v, tuple):
            items = [self.wrap_out(a) for a in v]
            return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
        if isinstance(v, list):
            return [self.wrap_out(a) for a in v]
        if hasattr(v, "dtype") and hasattr(v, "shape") and not isinstance(v, Tensor):
            return self.wrap(v)  # backend scalars such as numpy.float64
        return v

    def normalize(self, op, a):
        """One positional argument: a Tensor of ours, a Python scalar, None or other value."""
        T = self.T
        c = a.__class__
        if c is T:
            node = a._node
            while node is not None and not node.trace.active:  # leaked from a finished transform
                a = a._value
                node = a._node
            return a
        if isinstance(a, Tensor):
            if c is Owned:
                return claim(self, op, a)
            if c is self.B:  # a vmap's batched value: the batching interpreter's call
                raise BatchedArgument
            self.check_own(a, op)
        if a is None or c in _SCALARS or c is type:  # a type: a dtype such as numpy.float64
            return a
        if isinstance(a, self.A):
            return self.wrap(a)
        if _numpy_scalar(a):  # (numpy.float32(2), numpy.sqrt(d)): a 0-d array of ours, NumPy's dtype
            return self.wrap(self.xp.asarray(a))
        if isinstance(a, TracedNumber):  # a number jit traces, given to a function: this call's
            return a._concrete()  # value, guarded (operators take it as a scalar: _numbers.py)
        if hasattr(a, "__array_namespace__") or hasattr(a, "__dlpack__"):
            raise mixing_error(op, a, self.module)
        return a

    # ------------------------------------------------------------------ #
    # the slow path
    # ------------------------------------------------------------------ #
    def call(self, name, impl, args, params):
        """Dispatch op ``name`` on ``args`` (positional; Tensors may be tracked)."""
        if not self._claims:
            out = self.record_one_level(name, impl, args, params)
            if out is not _GENERAL:
                return out
        try:
            norm = [self.normalize(name, a) for a in args]
        except ConsumedError:
            self._claims = []
            same_twice(name, args)
            raise
        except BatchedArgument:  # (raised by normalize: no cost to calls without one)
            return _batch_dispatch(self, name, impl, args, params)
        T = self.T
        top = None
        for a in norm:
            if a.__class__ is T and a._node is not None:
                t = a._node.trace
                if top is None or t.level > top.level:
                    top = t
        if top is not None:
            rule = RULES.get(name)
            if (rule is None or top.stages) and active_traces[0].stages:  # jit: the stager records it
                return _stage_op(self, top, name, impl, norm, params)
        else:
            rule = None
        claims = self._claims
        if claims:  # consume() markers: maybe write into a consumed buffer
            self._claims = []
            if rule is None:
                out = run_owned(self, name, impl, norm, params, claims)
                if out is not None:
                    return out
            else:
                fail_claims(self, name, claims, "tape")
        if rule is None:
            if top is not None and _BATCHING:  # a vmap is open: a level below may be batched,
                # which raw_value would strip; the op one level down, as recording would
                return self.call(name, impl, tuple(
                    [a._value if a.__class__ is T and a._node is not None and a._node.trace is top
                     else a for a in norm]), params)
            raw = [raw_value(a) if a.__class__ is T else a for a in norm]
            try:
                out = impl(*raw, **params)
            except Exception as e:
                raise op_error(name, e, raw) from e
            return self.wrap_out(out)
        return self.record(name, impl, norm, params, rule, top)

    def record(self, name, impl, norm, params, rule, top):
        """Run op ``name`` one level below trace ``top`` and record its node there (the general
        path's recording; also vmap's, for a tape above a batch level: ``_batching``)."""
        T = self.T
        inner = []
        parents = []
        for a in norm:
            if a.__class__ is T and a._node is not None and a._node.trace is top:
                inner.append(a._value)
                parents.append(a._node)
            else:
                # the tape keeps its own handle, so rebinding or consuming the caller's never reaches it
                inner.append(self.make(a._value, a._node) if a.__class__ is T else a)
                parents.append(None)
        inner = tuple(inner)
        ans = self.call(name, impl, inner, params)
        if rule.nout == 1:
            if not self.is_differentiable(ans):
                return ans
            node = make_node(rule, inner, params, tuple(parents), ans, top, self.module)
            if top.saver is not None:  # checkpointing: may drop values (autodiff/_checkpoint.py)
                top.saver(node, impl)
            return self.make(ans, node)
        node = make_node(rule, inner, params, tuple(parents), tuple(ans), top, self.module)
        if top.saver is not None:
            top.saver(node, impl)
        outs = []
        for i, a in enumerate(ans):
            if self.is_differentiable(a):
                sel = make_node(SELECT, None, i, (node,), None, top, self.module)
                outs.append(self.make(a, sel))
            else:
                outs.append(a)
        return type(ans)(*outs) if hasattr(ans, "_fields") else tuple(outs)

    def record_one_level(self, name, impl, args, params):
        """The common traced case, without the general path's bookkeeping.

        Applies when every array argument is a Tensor of this namespace that
        is untracked or tracked at one active trace directly over a backend
        array (one level of differentiation), and the rule has one output.
        Runs the backend function and records a node when the op has a rule
        and a floating result. Returns ``_GENERAL`` when the general path must
        handle the call.
        """
        T = self.T
        top = None
        raw = []
        inner = []
        parents = []
        for a in args:
            c = a.__class__
            if c is T:
                n = a._node
                if n is None:
                    v = a._value
                    raw.append(v)
                    h = T()  # the tape's own handle (ownership)
                    h._value = v
                    h._node = None
                    inner.append(h)
                    parents.append(None)
                    continue
                tr = n.trace
                if tr is not top:  # (the first tracked argument; later ones must share its trace)
                    if top is not None or not tr.active:
                        return _GENERAL
                    top = tr
                low = a._value
                if low._node is not None:
                    return _GENERAL
                raw.append(low._value)
                inner.append(low)
                parents.append(n)
            elif c is float or c is int or a is None:
                raw.append(a)
                inner.append(a)
                parents.append(None)
            else:
                return _GENERAL
        if top is None or top.stages:  # (staging: the general path's stager records it)
            return _GENERAL
        rule = RULES.get(name)
        if rule is not None and rule.nout != 1:
            return _GENERAL
        try:
            v = impl(*raw, **params) if params else impl(*raw)
        except Exception as e:
            raise op_error(name, e, raw) from e
        if v.__class__ is not self.A:
            if rule is None or isinstance(v, (tuple, list)):
                return self.wrap_out(v)  # constants (several outputs only without a rule)
            v = self.coerce(v)  # a backend scalar such as numpy.float64
        ans = T()
        ans._value = v
        ans._node = None
        if rule is None:
            return ans
        ok = self.floating.get(v.dtype)
        if ok is None:
            ok = self.is_differentiable(ans)
        if not ok:
            return ans
        node = make_node(rule, tuple(inner), params, tuple(parents), ans, top, self.module)
        if top.saver is not None:  # checkpointing: may drop values (autodiff/_checkpoint.py)
            top.saver(node, impl)
        elif rule.saves is not None and len(inner) == len(rule.saves) - 1:
            _keep_only_read(node, rule.saves, raw, parents)
        t = T()
        t._value = ans
        t._node = node
        return t

    @contextlib.contextmanager
    def unseen_values(self, raw: bool = True):
        """Turn ``_cheap_any`` off (the module's, and with ``raw`` the backend namespace's)
        while the values seen are not the ones ops will run on: jit staging, vmap batching.

        Counted: the first block to begin saves the flags and the last to end restores
        them, so blocks that overlap in any order (traces in two threads, a vmap inside a
        jit trace) never leave them off.
        """
        with _UNSEEN_LOCK:
            if not self._unseen:
                self._seen = (self.module._cheap_any, self.raw_ns._cheap_any)
            self._unseen += 1
            self.module._cheap_any = False
            if raw:
                self.raw_ns._cheap_any = False
        try:
            yield
        finally:
            with _UNSEEN_LOCK:
                self._unseen -= 1
                if not self._unseen:
                    self.module._cheap_any, self.raw_ns._cheap_any = self._seen

    def is_differentiable(self, t) -> bool:
        """Whether a result of this dtype can carry a gradient (floating or complex)."""
        dt = raw_value(t).dtype
        cache = self.floating
        try:
            return cache[dt]
        except (KeyError, TypeError):
            ok = self.xp.isdtype(dt, ("real floating", "complex floating"))
            try:
                cache[dt] = ok
            except TypeError:
                pass
            return ok

    def op(self, name, impl):
        """Generic wrapper: positional arrays may be differentiable, keywords are params."""
        call = self.call

        def f(*args, **kwargs):
            return call(name, impl, args, kwargs)

        return f

    # ------------------------------------------------------------------ #
    # building the namespace
    # ------------------------------------------------------------------ #
    def _finish(self, f, name, ref, qual=None):
        f.__name__ = name
        f.__qualname__ = qual or name
        f.__module__ = self.module.__name__
        doc = getattr(ref, "__doc__", None)
        if doc:
            f.__doc__ = doc
        sig = _reference_signature(qual or name)
        if sig is None:
            try:
                sig = inspect.signature(ref)
            except (TypeError, ValueError):
                sig = None
        if sig is not None:
            f.__signature__ = sig
        return f

    def _unary(self, name, raw):
        """``name(x)``: the untracked and one-level traced cases inline, the rest through ``call``.

        The hot paths build their Tensors directly: an untracked op costs one
        backend call and one Tensor; a traced one adds a tape node
        (``make_node``) and the tracked handle. A unary op with a rule maps a
        floating input to a floating result, so no dtype check is needed.
        """
        T, A, call, coerce, mod, rule_of = self.T, self.A, self.call, self.coerce, self.module, RULES.get
        # a backend fix for some dtypes only (_wrappers._result_fix): call the backend
        # function itself and correct just the results of those dtypes
        plain, fixed, correct = getattr(raw, "plain", raw), getattr(raw, "dtypes", ()), getattr(raw, "correct", None)
        # the usual real dtypes pass by identity: hashing a NumPy dtype for the set costs more
        # than the two checks (0.05 us an op)
        f64, f32 = self.real_floats

        def f(x, /):
            if x.__class__ is T:
                n = x._node
                if n is None:  # untracked: the backend call and one Tensor, in a branch of its
                    # own (the fewest bytecodes: the tracked branch repeats these lines)
                    try:
                        v = plain(x._value)
                        if fixed and (dt := v.dtype) is not f64 and dt is not f32 and dt in fixed:
                            v = correct(x._value, v)
                    except Exception as e:
                        raise op_error(name, e, (x._value,)) from e
                    ans = T()
                    ans._value = v if v.__class__ is A else coerce(v)
                    ans._node = None
                    return ans
                # tracked: one level above a backend array on an active trace, or call
                low = x._value
                top = n.trace
                if low._node is not None or not top.active:
                    return call(name, raw, (x,), {})
                r = low._value
                try:
                    v = plain(r)
                    if fixed and (dt := v.dtype) is not f64 and dt is not f32 and dt in fixed:
                        v = correct(r, v)
                except Exception as e:
                    raise op_error(name, e, (r,)) from e
                ans = T()
                ans._value = v if v.__class__ is A else coerce(v)
                ans._node = None
                rule = rule_of(name)
                if rule is None:
                    return ans if not top.stages else call(name, raw, (x,), {})
                sv = top.saver  # (a saver may recompute a result: its nodes keep every input)
                s = rule.saves if sv is None else None
                if s is None:
                    node = make_node(rule, (low,), _NOPARAMS, (n,), ans, top, mod)
                else:  # only what the VJP reads (Rule.saves; _SAVES codes: 1 spec, 3 none)
                    m = s[0]
                    node = make_node(rule, (spec_of(r),) if m == 1 else _NOARG if m == 3 else (low,),
                                     _NOPARAMS, (n,), ans if s[1] else None, top, mod)
                if sv is not None:  # checkpointing (autodiff/_checkpoint.py)
                    sv(node, raw)
                t = T()
                t._value = ans
                t._node = node
                return t
            return call(name, raw, (x,), {})

        return f

    def _binary(self, name, raw, operator=False):
        """``name(x1, x2)``, or with ``operator`` the pair of methods ``(__op__, __rop__)``.

        Operands that are Tensors of this namespace (untracked, or tracked one
        level above a backend array on an active trace) or Python ``int`` /
        ``float`` take the fast path; anything else goes through ``call``. The
        operator form returns ``NotImplemented`` for operands that are neither
        scalars nor arrays (see ``_array_like``), so Python can try the other
        operand's reflected method.
        """
        T, A, call, coerce, mod, rule_of = self.T, self.A, self.call, self.coerce, self.module, RULES.get
        known = (A, Tensor)
        specs = _SPECS

        def slow(x1, x2):
            if operator:
                other = x2 if x1.__class__ is T else x1
                if not (other.__class__ in _SCALARS or isinstance(other, known) or _array_like(other)):
                    return NotImplemented
            return call(name, raw, (x1, x2), {})

        def f(x1, x2, /):
            c1 = x1.__class__
            c2 = x2.__class__
            if c1 is T:
                n1 = x1._node
                if n1 is None:
                    r1 = x1._value
                else:
                    l1 = x1._value
                    if l1._node is not None or not n1.trace.active:
                        return slow(x1, x2)
                    r1 = l1._value
            elif c1 is float or c1 is int:
                r1 = x1
                n1 = None
            else:
                return slow(x1, x2)
            if c2 is T:
                n2 = x2._node
                if n2 is None:
                    r2 = x2._value
                else:
                    l2 = x2._value
                    if l2._node is not None or not n2.trace.active:
                        return slow(x1, x2)
                    r2 = l2._value
            elif c2 is float or c2 is int:
                r2 = x2
                n2 = None
            else:
                return slow(x1, x2)
            if n1 is not None and n2 is not None and n2.trace is not n1.trace:
                return slow(x1, x2)  # two different traces: the general path orders them
            try:
                v = raw(r1, r2)
            except Exception as e:
                raise op_error(name, e, (r1, r2)) from e
            ans = T()
            ans._value = v if v.__class__ is A else coerce(v)
            ans._node = None
            if n1 is None:
                if n2 is None:
                    return ans
                top = n2.trace
            else:
                top = n1.trace
            rule = rule_of(name)
            if rule is None:
                return ans if not top.stages else call(name, raw, (x1, x2), {})
            sv = top.saver
            s = rule.saves if sv is None else None
            kept = ans
            if s is not None:  # only what the VJPs read (Rule.saves; _SAVES codes: 1 spec, 2 other,
                # 3 none); Python scalars as they are
                # (spec_of's cache read inline, spec_of itself on a miss or an unhashable key)
                m = s[0]
                if c1 is T and m and (m != 2 or n2 is None):
                    try:
                        l1 = NOT_KEPT if m == 3 else specs.get((r1.__class__, r1.shape, r1.dtype)) or spec_of(r1)
                    except TypeError:  # an unhashable key
                        l1 = spec_of(r1)
                    c1 = None  # (no handle below)
                m = s[1]
                if c2 is T and m and (m != 2 or n1 is None):
                    try:
                        l2 = NOT_KEPT if m == 3 else specs.get((r2.__class__, r2.shape, r2.dtype)) or spec_of(r2)
                    except TypeError:  # an unhashable key
                        l2 = spec_of(r2)
                    c2 = None
                if not s[2]:
                    kept = None
            if n1 is None:  # the tape keeps its own handle on a constant (ownership)
                if c1 is T:
                    l1 = T()
                    l1._value = r1
                    l1._node = None
                elif c1 is not None:
                    l1 = x1
            if n2 is None:
                if c2 is T:
                    l2 = T()
                    l2._value = r2
                    l2._node = None
                elif c2 is not None:
                    l2 = x2
            node = make_node(rule, (l1, l2), _NOPARAMS, (n1, n2), kept, top, mod)
            if sv is not None:
                sv(node, raw)
            t = T()
            t._value = ans
            t._node = node
            return t

        if not operator:
            return f

        def method(self, other, /):
            # self is a Tensor of this namespace: the untracked case needs two checks
            if self._node is None:
                c = other.__class__
                if c is float or c is int:
                    r2 = other
                elif c is T and other._node is None:
                    r2 = other._value
                else:
                    return f(self, other)
                try:
                    v = raw(self._value, r2)
                except Exception as e:
                    raise op_error(name, e, (self._value, r2)) from e
                t = T()
                t._value = v if v.__class__ is A else coerce(v)
                t._node = None
                return t
            return f(self, other)

        def rmethod(self, other, /):  # other <op> self, where other is not a Tensor
            c = other.__class__
            if self._node is None and (c is float or c is int):
                try:
                    v = raw(other, self._value)
                except Exception as e:
                    raise op_error(name, e, (other, self._value)) from e
                t = T()
                t._value = v if v.__class__ is A else coerce(v)
                t._node = None
                return t
            return f(other, self)

        return method, rmethod

    def _build_functions(self):
        from . import _wrappers

        mod, xp = self.module, self.xp
        fixes = self.fixes
        for name in api.UNARY:
            raw = fixes.get(name) or getattr(xp, name, None)
            if raw is not None:
                setattr(mod, name, self._finish(self._unary(name, raw), name, raw))
        for name in api.BINARY:
            raw = fixes.get(name) or getattr(xp, name, None)
            if raw is not None:
                setattr(mod, name, self._finish(self._binary(name, raw), name, raw))
        special = _wrappers.build(self)
        missing = _wrappers.fallbacks(self)  # portable versions of functions a backend lacks
        for name in api.OTHER:
            raw = fixes.get(name) or getattr(xp, name, None)
            if raw is None:
                if name in missing:
                    setattr(mod, name, self._finish(missing[name], name, missing[name]))
                continue
            if name in _BINARY_FAST:
                f = self._binary(name, raw)
            else:
                f = special.get(name) or self.op(name, raw)
            setattr(mod, name, self._finish(f, name, raw))
        for ext, names in (("linalg", api.LINALG), ("fft", api.FFT)):
            bext = getattr(xp, ext, None)
            if bext is None:
                continue
            sub = types.ModuleType(f"{mod.__name__}.{ext}")
            sub.__doc__ = f"The array API {ext!r} extension, differentiable."
            for name in names:
                qual = f"{ext}.{name}"
                raw = fixes.get(qual) or getattr(bext, name, None)
                if raw is None:
                    if qual in missing:
                        setattr(sub, name, self._finish(missing[qual], name, missing[qual], qual))
                    continue
                f = special.get(qual) or self.op(qual, raw)
                setattr(sub, name, self._finish(f, name, raw, qual))
            setattr(mod, ext, sub)
        for name, f in special.items():  # private helpers used by rules (_setitem ...)
            if name.startswith("_"):
                setattr(mod, name, f)
        for name in VIEW_FUNCTIONS:  # NumPy's views: a transform's write must reach them (_views)
            f = getattr(mod, name, None)
            if f is not None:
                setattr(mod, name, _viewing(name, f))

    def _build_constants(self):
        mod, xp = self.module, self.xp
        for name in api.CONSTANTS + tuple(api.DTYPES):
            if hasattr(xp, name):
                setattr(mod, name, getattr(xp, name))
        mod.__array_api_version__ = self.version
        info = getattr(xp, "__array_namespace_info__", None)
        if info is not None:
            if self.version < "2025.12" and isinstance(info().devices(), tuple):
                raw_info = info

                def info():  # devices() is a list up to 2024.12, a tuple from 2025.12
                    return _Info(raw_info())

                info.__doc__ = raw_info.__doc__
            mod.__array_namespace_info__ = info

        def to_device(x, device, stream):
            import array_api_compat as _compat  # every backend, torch/dask too

            if stream is not None:
                return self.wrap(_compat.to_device(raw_value(x), device, stream=stream))
            return self.call("_to_device", lambda a: _compat.to_device(a, device), (x,), {})

        mod._to_device = to_device

    def _build_tensor_methods(self):
        T, mod, call, make, A = self.T, self.module, self.call, self.make, self.A
        coerce = self.coerce
        xp = self.xp

        methods: dict = {}

        def binop(fname, reflected):
            raw = self.fixes.get(fname) or getattr(xp, fname)
            fn = getattr(mod, fname)
            if fname in api.BINARY or fname in _BINARY_FAST:  # the function's fast paths, as methods
                pair = methods.get(fname)
                if pair is None:
                    pair = methods[fname] = self._binary(fname, raw, operator=True)
                return pair[1] if reflected else pair[0]

            if reflected:
                def m(self, other, /):
                    c = other.__class__
                    if c is float or c is int:
                        if self._node is None:
                            try:
                                v = raw(other, self._value)
                            except Exception as e:
                                raise op_error(fname, e, (self,)) from e
                            return make(v if v.__class__ is A else coerce(v), None)
                        return getattr(mod, fname)(other, self)
                    if c is bool or c is complex or isinstance(other, (A, Tensor)) or _array_like(other):
                        return getattr(mod, fname)(other, self)
                    return NotImplemented
            else:
                def m(self, other, /):
                    c = other.__class__
                    if self._node is None and (
                        (c is T and other._node is None) or c is float or c is int
                    ):
                        try:
                            v = raw(self._value, other._value if c is T else other)
                        except Exception as e:
                            raise op_error(fname, e, (self, other)) from e
                        return make(v if v.__class__ is A else coerce(v), None)
                    if c is T or c in _SCALARS or isinstance(other, (A, Tensor)) or _array_like(other):
                        return fn(self, other)
                    return NotImplemented
            return m

        def inplace(fname):
            iop = getattr(operator, f"__i{_OP_OF[fname]}__")
            fix = self.fixes.get(fname)
            if fix is not None:  # the corrected function, written back into the target
                def iop(a, b, fix=fix):
                    v = fix(a, b)
                    _check_inplace(f"__i{_OP_OF[fname]}__", a, v)
                    try:
                        a[...] = v
                    except Exception:  # no item assignment (dask): rebind
                        return v
                    return a

            def m(self, other, /):
                c = other.__class__
                if not (c is T or c in _SCALARS or isinstance(other, (A, Tensor)) or _array_like(other)):
                    return NotImplemented
                if self._node is None and not active_traces and (
                    c is not T or other._node is None
                ):
                    from ._ownership import guard_write

                    guard_write(self, f"__i{_OP_OF[fname]}__")
                    if c is T:
                        b = raw_value(other)
                    elif isinstance(other, Tensor):  # consume() marker or dead tensor
                        b = raw_value(as_operand(other, f"__i{_OP_OF[fname]}__"))
                    else:
                        b = other
                    old = self._value
                    if not aliases:  # as in __setitem__: no other handle sees the write
                        old = copy.copy(old)
                    bd = getattr(b, "dtype", None)
                    if bd is not None and bd != old.dtype:  # as traced: never a silent cast
                        _check_promotion(f"__i{_OP_OF[fname]}__", xp, old, bd)
                    try:
                        v = iop(old, b)
                    except Exception as e:
                        raise op_error(f"__i{_OP_OF[fname]}__", e, (self, other)) from e
                    if v is not old:  # no true in-place (dask): keep shape and dtype as the spec says
                        _check_inplace(f"__i{_OP_OF[fname]}__", old, v)
                    self._value = v
                    return self
                before_write(self, f"__i{_OP_OF[fname]}__")
                new = getattr(mod, fname)(self, other)
                _check_inplace(f"__i{_OP_OF[fname]}__", self, new)
                if new.__class__ is not self.__class__:  # a batched value written in (vmap)
                    self.__class__ = new.__class__
                self._value, self._node = new._value, new._node
                written(self)  # views of self, and what self views, see the write (_views)
                return self

            return m

        for opname, fname in api.BINARY_OPERATORS.items():
            if not hasattr(xp, fname):
                continue
            setattr(T, f"__{opname}__", binop(fname, False))
            setattr(T, f"__r{opname}__", binop(fname, True))
            setattr(T, f"__i{opname}__", inplace(fname))
        for opname, fname in api.COMPARISONS.items():
            setattr(T, f"__{opname}__", binop(fname, False))
        for opname, fname in api.UNARY_OPERATORS.items():
            f = getattr(mod, fname, None)
            if f is not None:
                setattr(T, f"__{opname}__", (lambda f: lambda self: f(self))(f))
        T.__hash__ = None

        self_d = self
        aliases = bool(self.caps.in_place)  # whether eager views see writes (not Dask's)
        raw_get = self.fixes.get("_getitem")  # a backend's indexing gaps filled (dask)
        getitem_impl = raw_get or _getitem_raw
        strip = self.strip

        def __getitem__(self, key, /):
            if self._node is None:
                if _has_tensor(key):
                    if active_traces and active_traces[0].stages:
                        # jit: a constant indexed by a staged key, recorded by the stager
                        return _stage_op(self_d, None, "getitem", getitem_impl, (self,),
                                         {"key": _key_params(key, strip)})
                    key = strip(key)
                try:
                    v = self._value[key] if raw_get is None else raw_get(self._value, key)
                except Exception as e:
                    raise op_error("__getitem__", e, (self,)) from e
                r = make(v if v.__class__ is A else coerce(v), None)
                if active_traces and basic_key(key):  # a view a transform's write must reach
                    note_view(self, r, key)
                return r
            k = _key_params(key, strip)
            r = call("getitem", getitem_impl, (self,), {"key": k})
            if basic_key(k):
                note_view(self, r, k)
            return r

        def __setitem__(self, key, value, /):
            k = _key_params(key, strip)
            c = value.__class__
            if self._node is None and not active_traces and (c is not T or value._node is None):
                from ._ownership import guard_write

                guard_write(self, "__setitem__")
                try:
                    if isinstance(value, Tensor):
                        value = raw_value(as_operand(value, "__setitem__"))
                    if not aliases:  # (Dask) another handle may hold this very object (a
                        # reshape to the same shape returns it): write into a handle of our own
                        self._value = copy.copy(self._value)
                    self._value[k] = value
                except Exception as e:
                    from ._rules.indexing import _advanced, empty_write, scatter_last

                    if isinstance(e, ValueError) and empty_write(self._value, value, k):
                        return  # an empty array (Dask refuses the write): nothing to write
                    if not (isinstance(e, IndexError) and _advanced(k)):
                        raise op_error("__setitem__", e, (self,)) from e
                    # integer-array keys the backend refuses (array-api-strict): NumPy's result
                    self._value = scatter_last(xp, self._value, value, k)
                return
            before_write(self, "__setitem__")
            new = mod._setitem(self, value, key=k)
            _check_inplace("__setitem__", self, new)
            if new.__class__ is not self.__class__:  # a batched value written in (vmap)
                self.__class__ = new.__class__
            self._value, self._node = new._value, new._node
            written(self)  # views of self, and what self views, see the write (_views)

        T.__getitem__ = __getitem__
        T.__setitem__ = __setitem__


_OP_OF = {v: k for k, v in api.BINARY_OPERATORS.items()}


def _viewing(name, f):
    """``f`` (a namespace function whose result NumPy makes a view) noting its views while
    a transform records, so that in-place writes reach them as they do eagerly (_views)."""

    def g(*args, **kwargs):
        r = f(*args, **kwargs)
        if active_traces:
            note_function_view(name, f, args, kwargs, r)
        return r

    for a in ("__name__", "__qualname__", "__module__", "__doc__", "__signature__"):
        if hasattr(f, a):
            setattr(g, a, getattr(f, a))
    return g


#: two-array functions without parameters that take the elementwise binary fast path
_BINARY_FAST = frozenset({"matmul"})


def _under_plain(T):
    def under(x):
        return raw_value(x) if x.__class__ is T else None

    return under


def _raw_namespace(bxp, fixes, modname) -> types.ModuleType:
    """The backend namespace with ember's corrections: what VJPs use when nothing records them.

    A backward pass that no transform records runs its VJP rules on backend
    arrays (``_trace.backward``); this namespace gives them the same values as
    the wrapper, minus the wrapping.
    """
    raw = types.ModuleType(f"{modname}._raw")
    raw.__dict__.update({k: v for k, v in vars(bxp).items() if not k.startswith("__")})
    raw.__dict__.update(fixes)
    raw.__getattr__ = lambda name: getattr(bxp, name)  # names the backend makes lazily
    for ext in ("linalg", "fft"):  # extension fixes ("linalg.inv") go into the extension
        ext_fixes = {k.split(".", 1)[1]: v for k, v in fixes.items() if k.startswith(ext + ".")}
        if ext_fixes:
            sub = types.ModuleType(f"{modname}._raw.{ext}")
            sub.__dict__.update({k: v for k, v in vars(getattr(bxp, ext)).items() if not k.startswith("__")})
            sub.__dict__.update(ext_fixes)
            setattr(raw, ext, sub)
    return raw


def _api_version(bxp) -> str:
    """The standard version the namespace follows: $EMBER_ARRAY_API_VERSION, else the backend's.

    Only the few results whose type changed between versions depend on it
    (list vs tuple from meshgrid, broadcast_arrays and devices()).
    """
    import os

    v = os.environ.get("EMBER_ARRAY_API_VERSION") or getattr(bxp, "__array_api_version__", None)
    return v or "2024.12"


class _Info:
    """A backend's ``__array_namespace_info__()`` with ``devices()`` as a list (standard <= 2024.12)."""

    def __init__(self, raw):
        self._raw = raw

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def devices(self):
        return list(self._raw.devices())


def _check_promotion(op, xp, old, other_dtype):
    """Raise _check_inplace's DTypeError when ``old <op>= other`` would promote past old's
    dtype: the standard allows no such in-place op, and a traced one raises it, so an eager
    one (NumPy would cast back silently) raises it too."""
    try:
        dt = xp.result_type(old.dtype, other_dtype)
    except Exception:  # no promotion between the kinds at all (int and float on strict)
        dt = other_dtype
    if dt != old.dtype:
        _check_inplace(op, old, _Spec(old.shape, dt))


class _Spec:
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def _check_inplace(op, old, new):
    if new.shape != old.shape and not shapes_fit(tuple(new.shape), tuple(old.shape)):  # (NaN sizes)
        raise ShapeError(
            f"{op}: the result has shape {new.shape} but the target has shape {old.shape}; "
            "an in-place operation cannot change the shape of its target. Fix: write "
            "`x = x <op> y` to get a new tensor"
        )
    if new.dtype != old.dtype:
        raise DTypeError(
            f"{op}: the result dtype {new.dtype} differs from the target dtype {old.dtype}; "
            "an in-place operation keeps the target's dtype. Fix: cast first, e.g. "
            "`x = xp.astype(x, dtype)`"
        )


def _has_tensor(key):
    if isinstance(key, Tensor):
        return True
    if isinstance(key, tuple):
        return any(isinstance(k, Tensor) for k in key)
    return False


def _key_params(key, strip):
    """An index key with Tensors replaced by backend arrays (indices carry no gradient)."""
    return strip(key) if _has_tensor(key) else key


def _getitem_raw(x, key):
    return x[key]


def _stage_op(d, top, name, impl, norm, params):
    """An op met while ``ember.jit`` stages a function (``active_traces[0]`` is its staging
    trace): the stager records it, whatever its trace level, rule or result dtype."""
    d._claims = []  # (buffers are planned by jit, not claimed at staging)
    return active_traces[0].stage(d, top, name, impl, norm, params)
