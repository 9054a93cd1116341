"""``fit``: data-parallel training over the row chunks of a Dataset, on any Dask scheduler.

One step: the model (NumPy parameters) enters the step's graph once, as one
task that every chunk task reads (Dask ships it to each worker once: the
broadcast); each chunk task computes the loss gradient on its block; the
partial gradients are summed by a tree reduction (``split_every`` at a
time, :func:`chunked_value_and_grad`); the optimizer updates the parameters
here, in the client process. A rich progress bar shows the steps.

Fault tolerance comes from Dask's lineage: a worker that dies mid-step takes
only recomputable tasks with it (blocks read from zarr, gradients of the
broadcast model), which the scheduler reruns elsewhere; the sums run in the
same fixed tree, so the step's result does not change. For a client or
scheduler failure, ``checkpoint=`` writes parameters, optimizer state and
the position (epoch, step) atomically every ``checkpoint_every`` steps and
``fit`` resumes from that file: nothing done before it is lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from ._data import Dataset, _progress

__all__ = ["fit", "FitResult"]

BAD_CHUNKS_PER_STEP = "fit: chunks_per_step must be a positive int or None (all chunks), not {value!r}"
BAD_EPOCHS = "fit: epochs must be a non-negative int, not {value!r}"


@dataclass
class FitResult:
    """What :func:`fit` returns: final parameters and optimizer state, and the losses per step."""

    params: Any
    state: Any
    losses: list = field(default_factory=list)
    steps: int = 0
    resumed_from: int | None = None


def _steps_of_epoch(ds: Dataset, epoch: int, per_step: int) -> list[list[int]]:
    """The chunk indices of each step of ``epoch``: the Dataset's documented chunk order, cut."""
    order = [i for i, _ in ds._plan(epoch)]
    return [order[i:i + per_step] for i in range(0, len(order), per_step)]


def fit(
    loss: Callable[..., Any],
    params: Any,
    data: Dataset,
    optimizer: Any,
    *,
    epochs: int = 1,
    chunks_per_step: int | None = None,
    reduce: str = "mean",
    split_every: int = 8,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 1,
    progress: bool = True,
    callback: Callable[[int, float], Any] | None = None,
) -> FitResult:
    """Train ``params`` (a structure of NumPy arrays) on ``data`` with ``optimizer``, data parallel.

    ``loss(params, *block)`` returns the *sum* of the per-example losses of one
    block (as for :func:`chunked_value_and_grad`); each step uses
    ``chunks_per_step`` row chunks (default: all, i.e. full-batch gradient
    descent), visited in the Dataset's documented order (shuffled per epoch
    with ``shuffle=True``). ``reduce="mean"`` averages over the step's rows.

    The graph runs on Dask's default scheduler: a ``distributed.Client``
    when one exists (``ember.distributed.client()`` for a local cluster of
    processes, ``client("tcp://host:8786")`` for an existing scheduler),
    else threads in this process; the same call works on all of them.
    ``checkpoint``: a path written (atomically, by :func:`ember.io.save`) every
    ``checkpoint_every`` steps and at the end; when it exists at the start,
    training resumes from it. ``callback(step, loss)`` runs after each step.

    >>> import numpy as np, dask.array as da, ember.optim as optim
    >>> import ember.distributed as ed, ember.autodiff.numpy as xp
    >>> X = da.ones((8, 2), chunks=(4, 2)); y = da.zeros(8, chunks=4)
    >>> sq = lambda p, X, y: xp.sum((X @ p["w"] - y) ** 2)
    >>> res = ed.fit(sq, {"w": np.ones(2)}, ed.Dataset(X, y), optim.SGD(0.1), epochs=2, progress=False)
    >>> res.steps, [round(v, 4) for v in res.losses]
    (2, [4.0, 1.44])
    """
    import numpy as np

    from .. import io as _io

    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
        raise ValueError(BAD_EPOCHS.format(value=epochs))
    n_chunks = len(data.chunks)
    per_step = n_chunks if chunks_per_step is None else chunks_per_step
    if not isinstance(per_step, int) or isinstance(per_step, bool) or per_step < 1:
        raise ValueError(BAD_CHUNKS_PER_STEP.format(value=chunks_per_step))
    state = optimizer.init(params)
    done, losses, resumed = 0, [], None
    if checkpoint is not None and os.path.exists(checkpoint):
        saved = _io.load(checkpoint)
        params, state, done = saved["params"], saved["state"], int(saved["done"])
        losses = [float(v) for v in np.asarray(saved["losses"])]
        resumed = done

    def save():
        if checkpoint is not None:
            _io.save(checkpoint, {"params": params, "state": state, "done": done,
                                  "losses": np.asarray(losses, dtype=np.float64)})

    plan = [g for e in range(epochs) for g in _steps_of_epoch(data, e, per_step)]
    with _progress(progress, len(plan), "fit (steps)") as tick:
        for _ in range(done):
            tick()
        for j in range(done, len(plan)):
            value, grads = data.value_and_grad(loss, params, chunks=plan[j], reduce=reduce,
                                               split_every=split_every)  # this step's row chunks
            params, state = optimizer.update(params, grads, state)
            losses.append(float(value))
            done = j + 1
            if done % checkpoint_every == 0 or done == len(plan):
                save()
            tick()
            if callback is not None:
                callback(done, losses[-1])
    return FitResult(params=params, state=state, losses=losses, steps=done, resumed_from=resumed)
