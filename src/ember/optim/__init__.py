"""ember.optim: optimizers whose state is indexed by parameter path.

An optimizer is two pure functions over any ember structure::

    opt = ember.optim.AdamW(1e-3, weight_decay=0.01)
    state = opt.init(params)
    params, state = opt.update(params, grads, state)

The state is ``{"step": int, "params": {path: {"step": int, slot: array}}}``
(arrays on each parameter's backend), so it saves with :func:`ember.io.save`,
survives restarts and refactors (:func:`rename`), and follows a growing model
under explicit policies (``on_new``, ``on_missing``). Parameter groups
(:class:`Group`) and freezing select parameters by path pattern; learning
rates may be schedules (:mod:`ember.optim.schedules`). :class:`Stateful`
wraps an optimizer for loops that just step. :func:`ember.training.train_step` fuses the
gradient and the update into one call (``loss, params, state = step(params,
state, *batch)``), writing the new parameters into the gradients' buffers.
On a lazy backend (Dask) both persist the new parameters and state at step
boundaries, so graphs stay bounded (``persist=`` policy, :mod:`ember.optim.lazy`).

>>> import numpy as np, ember.optim as optim
>>> opt = optim.Stateful(optim.Adam(0.1), {"w": np.ones(2)})
>>> opt.step({"w": np.ones(2)}, {"w": np.ones(2)})["w"].round(4).tolist()
[0.9, 0.9]
"""

from . import schedules
from ._base import Optimizer, Options, PathOptimizer, State
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .clip import clip_by_global_norm, global_norm
from .groups import Group, assign_groups
from .lazy import GraphGrowthWarning
from .lion import Lion
from .policies import ON_MISSING, ON_NEW, StateMismatchWarning, StateReport, load_state
from .rmsprop import RMSprop
from .sgd import SGD
from .stateful import Stateful
from .surgery import drop, rename, reset, select

__all__ = [
    "Optimizer",
    "PathOptimizer",
    "Options",
    "State",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Lion",
    "clip_by_global_norm",
    "global_norm",
    "schedules",
    "Group",
    "assign_groups",
    "ON_NEW",
    "ON_MISSING",
    "StateReport",
    "StateMismatchWarning",
    "load_state",
    "reset",
    "select",
    "drop",
    "rename",
    "Stateful",
    "GraphGrowthWarning",
]
