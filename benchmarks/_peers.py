"""Set-ups of the peer frameworks shared by the workload scripts in ``benchmarks/``.

Why: cnn, transformer, mlp, graph, higher_order and conv each time the same
computation in ember, torch, JAX, HIPS autograd and MyGrad.  How a peer is
imported and configured (one torch thread, JAX on CPU with float64), how its
parameters are made trainable and how one SGD step ``p - lr * g`` is taken
do not depend on the workload, so they live here once; the scripts only
write their model.

Example::

    torch = import_torch()
    p = torch_params(torch, params)
    step = torch_sgd_step(torch, p, lambda p: (x @ p["w"]).sum(), lr=0.01)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from _harness import Skip, Workload, optional_import

Params = dict[str, Any]
Step = Callable[[], Any]

#: The dtypes of the workloads that run once per float dtype (mlp, conv).
FLOAT_DTYPES = (np.float32, np.float64)

MSG_EMBER_NOT_READY = "ember API not ready: {kind}: {exc}"

#: JAX settings every script uses: float64 allowed (the float64 workloads), CPU only.
_JAX_CONFIG = {"jax_enable_x64": True, "jax_platforms": "cpu"}


# ----------------------------------------------------------------------- imports


def import_torch() -> Any:
    """Import torch (or raise :class:`Skip`) and give it one intra-op thread."""
    torch = optional_import("torch")
    torch.set_num_threads(1)
    return torch


def import_jax() -> tuple[Any, Any]:
    """Import JAX (or raise :class:`Skip`) configured for CPU and float64; returns ``(jax, jnp)``."""
    jax = optional_import("jax")
    for key, value in _JAX_CONFIG.items():
        jax.config.update(key, value)
    return jax, jax.numpy


def import_autograd() -> tuple[Any, Any]:
    """Import HIPS autograd (or raise :class:`Skip`); returns ``(autograd, autograd.numpy)``."""
    return optional_import("autograd"), optional_import("autograd.numpy")


@contextlib.contextmanager
def ember_ready() -> Iterator[None]:
    """Turn any failure while building an ember implementation into :class:`Skip`.

    Why: ember's API may be incomplete while a benchmark already exists; the
    table then says ``ember: n/a (ember API not ready: ...)`` instead of failing.
    Also opts into ember's GC tuning (``ember.config(gc_threshold=...)``), as a
    training program after speed would; the malloc tuning is set for every peer
    alike at import (``_harness.configure_env``).
    """
    try:
        import ember

        # the process tuning a training program opts into (docs/performance.md)
        ember.config(gc_threshold=50_000)  # (malloc's: at import, _harness.configure_env)
        yield
    except Skip:
        raise
    except Exception as exc:
        raise Skip(MSG_EMBER_NOT_READY.format(kind=type(exc).__name__, exc=exc)) from exc


# ------------------------------------------------------------------- SGD steps


def _sgd(p: Params, g: Params, lr: float) -> Params:
    return {k: v - lr * g[k] for k, v in p.items()}


def sgd_step(
    value_and_grad: Callable[[Any], tuple[Any, Any]],
    params: Any,
    lr: float,
    tree_map: Callable[..., Any] | None = None,
) -> Step:
    """A step that evaluates ``value_and_grad(p)``, sets ``p = p - lr * g`` and returns the value.

    ``params`` is a flat dict of arrays, or any pytree when ``tree_map``
    (e.g. ``ember.tree.map``) is given.  Works for ember and HIPS autograd.
    """
    state = {"p": dict(params) if tree_map is None else params}

    if tree_map is None:
        update = functools.partial(_sgd, lr=lr)
    else:

        def update(p: Any, g: Any) -> Any:
            return tree_map(lambda a, b: a - lr * b, p, g)

    def step() -> Any:
        val, g = value_and_grad(state["p"])
        state["p"] = update(state["p"], g)
        return val

    return step


def ember_optim_step(ember: Any, value_and_grad: Callable[[Any], tuple[Any, Any]], params: Params,
                     lr: float) -> Step:
    """``ember.optim.SGD(lr)`` over ``params``, handed the gradients' buffers (``consume``)."""
    opt = ember.optim.SGD(lr)
    state = {"p": dict(params), "s": opt.init(params)}

    def step() -> Any:
        val, g = value_and_grad(state["p"])
        state["p"], state["s"] = opt.update(state["p"], ember.consume(g), state["s"])
        return val

    return step


def ember_train_step(ember: Any, loss: Callable[[Any], Any], params: Params, lr: float) -> Step:
    """``ember.training.train_step(loss, ember.optim.SGD(lr))`` over ``params``: gradient and update
    in one call, the new parameters in the gradients' buffers."""
    opt = ember.optim.SGD(lr)
    # (ember.optim held train_step before ember.training: A/B runs against older trees)
    train = getattr(ember, "training", ember.optim).train_step(loss, opt)
    state = {"p": dict(params), "s": opt.init(params)}

    def step() -> Any:
        val, state["p"], state["s"] = train(state["p"], state["s"])
        return val

    return step


def ember_model_step(ember: Any, loss: Callable[[Any], Any], model: Any, lr: float) -> Step:
    """ember step over a pytree of modules: ``value_and_grad``, ``ember.tree.map`` update.

    The step is run once here, so that a gap in ember's API shows up while
    setting up (inside :func:`ember_ready`) rather than while timing.
    """
    step = sgd_step(ember.value_and_grad(loss), model, lr, tree_map=ember.tree.map)
    step()
    return step


def torch_params(torch: Any, params: Params) -> Params:
    """Leaf tensors with ``requires_grad`` holding copies of the NumPy ``params``."""
    return {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}


def torch_sgd_step(torch: Any, params: Params, loss: Callable[[Params], Any], lr: float) -> Step:
    """Eager torch step: ``loss(params)``, ``.backward()``, in-place update under ``no_grad``."""

    def step() -> Any:
        val = loss(params)
        val.backward()
        with torch.no_grad():
            for v in params.values():
                v -= lr * v.grad
                v.grad = None
        return val

    return step


def jax_sgd_step(jax: Any, loss: Callable[[Params], Any], params: Params, lr: float, jit: bool) -> Step:
    """JAX step: ``value_and_grad`` + update, the whole update under ``jax.jit`` when ``jit``."""
    vg = jax.value_and_grad(loss)

    def update(p: Params) -> tuple[Any, Params]:
        val, g = vg(p)
        return val, _sgd(p, g, lr)

    if jit:
        update = jax.jit(update)
    state = {"p": {k: jax.numpy.asarray(v) for k, v in params.items()}}

    def step() -> Any:
        val, state["p"] = update(state["p"])
        return jax.block_until_ready((val, state["p"]))

    return step


def mygrad_sgd_step(mg: Any, loss: Callable[[Params], Any], params: Params, lr: float) -> Step:
    """MyGrad step: fresh tensors from the current params, ``.backward()``, NumPy update."""
    state = {"p": dict(params)}

    def step() -> Any:
        p = {k: mg.tensor(v) for k, v in state["p"].items()}
        val = loss(p)
        val.backward()
        state["p"] = {k: v.data - lr * v.grad for k, v in p.items()}
        return val

    return step


# ------------------------------------------------------------------- workloads


def dtype_workloads(
    prefix: str, setups: dict[str, Callable[[Any], Step]], description: str, **kwargs: Any
) -> list[Workload]:
    """One :class:`Workload` per dtype of :data:`FLOAT_DTYPES`, named ``<prefix>_<dtype>``.

    ``setups`` take the NumPy dtype; ``{dtype}`` in ``description`` becomes its
    name; ``kwargs`` go to every ``Workload`` (unit, reference, ratios, ...).
    """
    out = []
    for dtype in FLOAT_DTYPES:
        name = np.dtype(dtype).name
        impls = {k: functools.partial(setup, dtype) for k, setup in setups.items()}
        out.append(
            Workload(name=f"{prefix}_{name}", description=description.format(dtype=name), impls=impls,
                     **kwargs)
        )
    return out


def jax_impls(setup_jax: Callable[..., Step]) -> dict[str, Callable[..., Step]]:
    """``jax-eager`` and ``jax-jit`` from one JAX setup that takes ``jit=``."""
    return {f"jax-{mode}": functools.partial(setup_jax, jit=mode == "jit") for mode in ("eager", "jit")}


def model_step_workload(
    name: str, description: str, make_problem: Callable[[], Any], setups: dict[str, Callable[[Any], Step]]
) -> Workload:
    """A ``ms/step`` workload of one SGD step of a model against torch (cnn, transformer).

    Each setup gets a fresh ``make_problem()``; the extra ratios are ember
    against torch and against jitted JAX.
    """

    def bind(setup: Callable[[Any], Step]) -> Callable[[], Step]:
        return lambda: setup(make_problem())

    return Workload(
        name=name,
        unit="ms/step",
        description=description,
        impls={k: bind(setup) for k, setup in setups.items()},
        reference="torch",
        ratios=[("ember", "torch"), ("ember", "jax-jit")],
    )
