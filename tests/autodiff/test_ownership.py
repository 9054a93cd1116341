"""Ownership: consume / share / clone, buffer reuse, safe in-place writes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
import ember.autodiff.numpy as xp
from ember import ConsumedError, ReuseError
from ember.autodiff import _ownership as own
from ember.autodiff._ownership import HiddenCopyWarning, clone, config, consume, share


def ptr(t):
    return t.raw.__array_interface__["data"][0]


def fresh(values=(1.0, 2.0, 3.0, 4.0), dtype=None):
    """An ember-owned tensor (not borrowed)."""
    return xp.asarray(np.asarray(values, dtype=dtype), copy=True)


# --------------------------------------------------------------------------- #
# reuse
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "op",
    [
        lambda c: xp.sin(c),
        lambda c: xp.exp(c),
        lambda c: -c,
        lambda c: c * 2.0,
        lambda c: 2.0 - c,
        lambda c: c + xp.ones(4),
        lambda c: xp.ones(4) / c,
        lambda c: xp.maximum(c, 0.5),
        lambda c: xp.where(xp.ones(4) > 0, c, 0.0),
        lambda c: xp.where(xp.ones(4) > 2, 1.0, c),
        lambda c: xp.clip(c, 1.5, 3.5),
        lambda c: xp.round(c),
    ],
)
def test_consume_writes_into_the_consumed_buffer_and_gives_the_same_values(op):
    x = fresh()
    expected = op(x.clone())
    p = ptr(x)
    y = op(consume(x))
    assert ptr(y) == p
    np.testing.assert_allclose(y.raw, expected.raw)


def test_a_consumed_float32_maximum_with_a_scalar_writes_through_the_namespace_kernel():
    # NumPy's float32 maximum with a scalar is not vectorized; the namespace's kernel (against a
    # kept filled array, autodiff/_direct.py) takes out= itself, so consume writes through it
    d = xp._dispatch
    assert own._out_kernel(d, "maximum") is d.fixes["maximum"] and own._out_kernel(d, "add") is np.add
    values = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    values[::7] = -0.0
    x = fresh(values)
    p = ptr(x)
    y = xp.maximum(consume(x), 0.0)
    assert ptr(y) == p
    np.testing.assert_array_equal(y.raw.view(np.uint32), np.maximum(values, 0.0).view(np.uint32))


def test_a_chain_of_consumes_keeps_one_buffer():
    y = xp.sin(fresh())
    p = ptr(y)
    for _ in range(5):
        y = xp.cos(consume(y))
        y = consume(y) * 1.0
        y = consume(y) + 1.0
    assert ptr(y) == p


def test_method_form_and_strict_success():
    x = fresh()
    p = ptr(x)
    y = x.consume(strict=True) * 3.0
    assert ptr(y) == p
    assert y.raw.tolist() == [3.0, 6.0, 9.0, 12.0]


@pytest.mark.parametrize(
    "setup, reason",
    [
        (lambda x: [x.share()], "other reference"),
        (lambda x: [x[1:3]], "other reference"),
        (lambda x: [xp.reshape(x, (2, 2))], "other reference"),
        (lambda x: [x.raw], "other reference"),
    ],
)
def test_another_handle_view_or_raw_reference_blocks_reuse(setup, reason):
    x = fresh()
    keep = setup(x)
    before = [np.array(k.raw if hasattr(k, "raw") else k) for k in keep]
    p = ptr(x)
    y = consume(x) * 10.0
    assert ptr(y) != p  # allocated
    for k, b in zip(keep, before):  # nobody else saw a write
        np.testing.assert_array_equal(k.raw if hasattr(k, "raw") else k, b)
    x2 = fresh()
    keep = setup(x2)
    with pytest.raises(ReuseError, match=reason):
        consume(x2, strict=True) * 10.0


def test_reuse_works_again_once_the_other_handle_is_gone():
    x = fresh()
    s = x.share()
    del s
    p = ptr(x)
    assert ptr(consume(x, strict=True) + 1.0) == p


def test_share_is_a_second_handle_and_clone_a_copy():
    x = fresh()
    s = share(x)
    c = clone(x)
    x += 1.0
    assert s.raw.tolist() == [2.0, 3.0, 4.0, 5.0]
    assert c.raw.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert x.share() is not x and x.clone().raw is not x.raw


def test_view_does_not_own_its_memory():
    x = fresh()
    v = x[1:3]
    with pytest.raises(ReuseError, match="view"):
        consume(v, strict=True)
    vv = v  # consume of a view allocates and leaves the base alone
    y = consume(vv) * 0.0
    assert x.raw.tolist() == [1.0, 2.0, 3.0, 4.0] and y.raw.tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "make_op, reason",
    [
        (lambda: consume(fresh([1.0, 2.0])) + xp.ones((3, 2)), "shape"),
        (lambda: consume(fresh([1, 2], dtype=np.int32)) * 0.5, "dtype"),
        (lambda: xp.sin(consume(fresh([1, 2], dtype=np.int32))), "dtype"),
        (lambda: xp.sum(consume(fresh())), "no in-place form"),
    ],
)
def test_result_that_does_not_fit_allocates_and_strict_says_why(make_op, reason):
    make_op()  # non-strict: just allocates
    strict_op = {
        "shape": lambda: consume(fresh([1.0, 2.0]), strict=True) + xp.ones((3, 2)),
        "dtype": lambda: consume(fresh([1, 2], dtype=np.int32), strict=True) * 0.5,
        "no in-place form": lambda: xp.sum(consume(fresh(), strict=True)),
    }
    with pytest.raises(ReuseError, match=reason):
        strict_op[reason]()


# --------------------------------------------------------------------------- #
# misuse
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "use",
    [
        lambda x: x + 1.0,
        lambda x: xp.sin(x),
        lambda x: repr(x),
        lambda x: x.shape,
        lambda x: x[0],
        lambda x: x.raw,
        lambda x: float(x[0]),
        lambda x: x.share(),
    ],
)
def test_use_after_consume_names_the_consume_line(use):
    x = fresh()
    y = consume(x) * 1.0  # noqa: F841
    with pytest.raises(ConsumedError, match=r"test_ownership\.py:\d+") as e:
        use(x)
    assert "share()" in str(e.value)  # the fix


def test_alias_of_a_consumed_tensor_is_dead_too():
    x = fresh()
    alias = x
    xp.sin(consume(x))
    with pytest.raises(ConsumedError, match="handed to `sin`"):
        alias * 2.0


def test_consume_twice_and_spent_marker():
    x = fresh()
    m = consume(x)
    with pytest.raises(ConsumedError, match="already consumed"):
        consume(x)
    _ = m + 1.0
    with pytest.raises(ConsumedError, match="already handed to"):
        m * 2.0


@pytest.mark.parametrize(
    "call",
    [
        lambda x: xp.add(consume(x), x),
        lambda x: xp.multiply(x, consume(x)),
        lambda x: consume(x) + x,
        lambda x: x + consume(x),
        lambda x: xp.where(x > 0, consume(x), x),
    ],
)
def test_same_tensor_twice_in_one_call_is_detected(call):
    x = fresh()
    with pytest.raises(ConsumedError, match="passed twice") as e:
        call(x)
    assert "s = x.share()" in str(e.value)


def test_consume_of_a_raw_array_is_a_type_error_with_the_fix():
    with pytest.raises(TypeError, match="copy=True"):
        consume(np.ones(3))


def test_consume_of_a_structure_consumes_its_tensors():
    raw = np.ones(2)
    tree = {"w": xp.ones(3) * 2.0, "layers": [xp.ones(2) * 3.0, raw], "n": 4}
    w = tree["w"]
    out = consume(tree)
    assert type(out) is dict and out["n"] == 4 and out["layers"][1] is raw  # other leaves stay
    assert all(type(m) is own.Owned for m in (out["w"], out["layers"][0]))
    with pytest.raises(ConsumedError, match=r"consumed at .*test_ownership.py"):
        w + 1.0
    assert (xp.sin(out["w"]).raw == np.sin(2.0)).all()
    with pytest.raises(ConsumedError, match="already consumed"):
        consume({"again": w})
    with pytest.raises(TypeError, match="copy=True"):  # nothing to consume in it
        consume({"a": np.ones(3), "b": 1.0})


def test_a_tensor_at_several_leaves_is_consumed_once():
    # tied weights: the first leaf hands the buffer over, the others keep reading it (as
    # jit's donate does); the op given the marker then allocates
    def address(a):
        return a.raw.__array_interface__["data"][0]

    alone = xp.ones(3) * 2.0
    at = address(alone)
    assert address(xp.sin(consume({"w": alone})["w"])) == at  # (one leaf: written in place)
    t = xp.ones(3) * 2.0
    at = address(t)
    out = consume({"enc": t, "dec": [t], "other": xp.ones(2) * 3.0})
    leaves = (out["enc"], out["dec"][0])
    assert sorted(type(v).__name__ for v in leaves) == ["Owned", "Tensor"]
    assert type(out["other"]) is own.Owned
    marker, share = leaves if type(leaves[0]) is own.Owned else leaves[::-1]
    r = xp.sin(marker)
    assert address(r) != at
    np.testing.assert_array_equal(share.raw, [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(r.raw, np.sin([2.0, 2.0, 2.0]))
    with pytest.raises(ConsumedError):
        t + 1.0
    m = consume(xp.ones(2) * 1.0)  # a marker at two leaves is still handed over once only
    with pytest.raises(ConsumedError, match="already consumed"):
        consume([m, m])


def test_strict_failure_at_consume_leaves_x_alive():
    x = xp.asarray(np.ones(3))  # borrowed
    with pytest.raises(ReuseError, match="borrowed"):
        consume(x, strict=True)
    assert x.raw.tolist() == [1.0, 1.0, 1.0]


# --------------------------------------------------------------------------- #
# borrowed inputs and hidden copies
# --------------------------------------------------------------------------- #
def test_borrowed_array_is_never_written():
    a = np.ones(4)
    x = xp.asarray(a)
    y = consume(x) * 5.0
    assert a.tolist() == [1.0] * 4 and y.raw.tolist() == [5.0] * 4
    x2 = xp.asarray(a)
    x2 += 1.0
    x2[0] = 9.0
    v = xp.asarray(a)[1:3]
    v *= 3.0
    assert a.tolist() == [1.0] * 4
    assert x2.raw.tolist() == [9.0, 2.0, 2.0, 2.0] and v.raw.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("source", ["borrowed", "own"])
@pytest.mark.parametrize("write", ["setitem", "iadd"])
def test_a_broadcast_view_refuses_writes_whoever_owns_the_memory(source, write):
    # a borrowed array's view was copied and written (copy-on-write), one of ember's own
    # raised: both raise now, as NumPy's read-only broadcast views do
    from ember import ReadOnlyError

    a = np.ones(3)
    x = xp.asarray(a) if source == "borrowed" else xp.ones(3) * 1.0
    v = xp.broadcast_to(x, (2, 3))
    with pytest.raises(ReadOnlyError, match="read-only"):
        if write == "setitem":
            v[0, 0] = 5.0
        else:
            v += 1.0
    assert v.raw.tolist() == [[1.0] * 3] * 2 and x.raw.tolist() == [1.0] * 3 and a.tolist() == [1.0] * 3
    r = np.ones(3)
    r.flags.writeable = False  # (a read-only array passed in is still copied on write)
    t = xp.asarray(r)
    t[0] = 5.0
    assert t.raw.tolist() == [5.0, 1.0, 1.0] and r.tolist() == [1.0] * 3


def test_owned_writes_are_visible_through_views_like_numpy():
    x = fresh()
    v = x[1:3]
    x += 1.0
    v *= 10.0
    assert x.raw.tolist() == [2.0, 30.0, 40.0, 5.0]


def test_on_hidden_copy_modes():
    a = np.ones(2)
    x = xp.asarray(a)
    with config(on_hidden_copy="warn"):
        with pytest.warns(HiddenCopyWarning, match="borrowed"):
            x += 1.0
    x = xp.asarray(a)
    with config(on_hidden_copy="error"):
        with pytest.raises(ReuseError, match="hidden copy|copied a buffer"):
            x += 1.0
    assert own.get_config()["on_hidden_copy"] == "ignore"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = xp.asarray(a)
        x += 1.0  # ignore mode: silent
    with pytest.raises(ValueError, match="on_hidden_copy"):
        config(on_hidden_copy="loud")
    with pytest.raises(TypeError, match="unknown option"):
        config(nope=1)


# --------------------------------------------------------------------------- #
# tapes
# --------------------------------------------------------------------------- #
def test_constant_saved_by_the_tape_then_modified_in_place_inside_grad():
    c = fresh([1.0, 2.0, 3.0])

    def f(w):
        y = w * c
        c.__iadd__(1.0)  # c += 1 after the tape saved c
        c[0] = 100.0
        return xp.sum(y)

    g = ember.grad(f)(xp.ones(3))
    assert g.raw.tolist() == [1.0, 2.0, 3.0]
    assert c.raw.tolist() == [100.0, 3.0, 4.0]


def test_retained_vjp_tape_keeps_its_values():
    k = fresh([3.0, 4.0])
    out, pull = ember.vjp(lambda x: x * k, fresh([1.0, 2.0]))
    with config(on_hidden_copy="warn"):
        with pytest.warns(HiddenCopyWarning, match="tape"):
            k += 100.0
    assert pull(xp.ones(2))[0].raw.tolist() == [3.0, 4.0]
    assert k.raw.tolist() == [103.0, 104.0]
    y, pull2 = ember.vjp(xp.exp, fresh([1.0, 2.0]))
    z = consume(y) * 0.0  # the tape's own handle blocks reuse
    assert z.raw.tolist() == [0.0, 0.0]
    np.testing.assert_allclose(pull2(xp.ones(2))[0].raw, np.exp([1.0, 2.0]))


def test_consume_inside_grad_is_safe_and_strict_names_the_tape():
    def f(w, strict):
        a = w * 2.0
        b = xp.sin(consume(a, strict=strict))
        k = xp.exp(consume(xp.ones(3) * 0.5, strict=True))  # untracked: reused
        return xp.sum(b * k)

    def f0(w):
        return xp.sum(xp.sin(w * 2.0) * xp.exp(xp.ones(3) * 0.5))

    w = fresh([0.1, 0.2, 0.3])
    np.testing.assert_allclose(ember.grad(f)(w, False).raw, ember.grad(f0)(w).raw)
    with pytest.raises(ReuseError, match="tracked"):
        ember.grad(f)(w, True)


def test_consume_of_a_constant_the_tape_saved_allocates():
    def f(w):
        c = xp.ones(3) * 2.0
        y = w * c  # saves c
        c2 = consume(c) + 1.0
        return xp.sum(y) + xp.sum(c2)

    assert ember.grad(f)(fresh([1.0, 1.0, 1.0])).raw.tolist() == [2.0, 2.0, 2.0]


def test_consumed_input_of_grad_is_dead_and_grad_input_is_not_consumed():
    x = fresh()
    g = ember.grad(lambda t: xp.sum(t * t))(x)
    assert g.raw.tolist() == [2.0, 4.0, 6.0, 8.0]
    y = consume(x) + 1.0  # the finished tape kept no handle: reuse allowed
    assert y.raw.tolist() == [2.0, 3.0, 4.0, 5.0]


# --------------------------------------------------------------------------- #
# backends that allocate
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("name", ["array_api_strict", "dask"])
def test_other_backends_accept_consume_but_allocate(name):
    ns = pytest.importorskip(f"ember.autodiff.{name}")
    x = ns.asarray([1.0, 2.0, 3.0], copy=True)
    y = ns.sin(consume(x)) * 2.0
    np.testing.assert_allclose(np.asarray(y.raw), 2 * np.sin([1.0, 2.0, 3.0]))
    with pytest.raises(ConsumedError):
        x + 1.0
    x2 = ns.asarray([1.0, 2.0], copy=True)
    with pytest.raises(ReuseError, match="cannot write in place"):
        consume(x2, strict=True)


def test_a_consume_marker_reports_its_namespace():
    # array_api_compat.array_namespace (and so every nn layer) asks the marker: it used to get
    # the class's property object and fail inside array_api_compat
    import array_api_compat

    xp = pytest.importorskip("ember.autodiff.numpy")
    w = xp.ones((4, 3)) * 1.0
    assert array_api_compat.array_namespace(xp.ones(2), ember.consume(xp.ones(2) * 1.0)) is xp
    y = ember.nn.linear(xp.ones((2, 3)), ember.consume(w), None)
    assert y.raw.tolist() == [[3.0] * 4] * 2


def test_a_view_spanning_a_base_nobody_else_holds_is_written():
    # the transpose of a fresh result (nn.linear's weight gradient for a column-major weight):
    # its memory is all of its base's, and only the view holds the base
    x = xp.asarray(np.arange(6.0).reshape(2, 3), copy=True)
    v = xp.matrix_transpose(x)
    with pytest.raises(ReuseError, match="other reference|view"):  # x still holds the base
        consume(v.share(), strict=True) * 2.0
    del x
    p = ptr(v)
    y = consume(v, strict=True) * 2.0
    assert ptr(y) == p and y.raw.tolist() == [[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]
    # a slice covers part of its base (the rest may be read through another view later): never
    s = xp.asarray(np.arange(4.0), copy=True)[1:3]
    with pytest.raises(ReuseError, match="view"):
        consume(s, strict=True) * 2.0
    # nor a view of a base another array holds
    base = np.arange(6.0).reshape(2, 3)
    t = xp.asarray(base, copy=True)
    raw = t.raw
    w = xp.matrix_transpose(t)
    del t
    with pytest.raises(ReuseError, match="view"):
        consume(w, strict=True) * 2.0
    assert raw.tolist() == base.tolist()
