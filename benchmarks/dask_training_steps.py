"""Step time over a long training run on a lazy backend: does it stay flat?

Workload: the README's MLP (4-32-2, Adam, batch 64) trained for ``--steps``
steps (default 200) on ``ember.autodiff.dask`` with no persist in the loop:
``loss, model, state = train_step(model, state, x, y)`` and the loss read
each step (``float``), as a user would. The optimizer's default
``persist="step"`` policy keeps the graphs bounded.

Reports the median step time over steps 6-15 ("step 10") and over the last
ten steps ("step 200"), their ratio (acceptance: <= 1.2), and the number of
tasks in the loss graph and in one parameter's graph at both ends (constant
when the graphs are bounded). ``--loop update`` times ``value_and_grad`` +
``opt.update`` instead of ``train_step``; ``--persist never`` shows the
unbounded growth for comparison (use few steps).

Run: ``python benchmarks/dask_training_steps.py [--steps 200] [--loop train_step|update]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import ember  # noqa: E402
import ember.autodiff.dask as xd  # noqa: E402
import ember.autodiff.numpy as xn  # noqa: E402
import ember.nn as nn  # noqa: E402
import ember.optim as optim  # noqa: E402
import ember.random as er  # noqa: E402


class Net(nn.Module):
    hidden: nn.Linear
    out: nn.Linear

    def __call__(self, x):
        return self.out(nn.relu(self.hidden(x)))


def _tasks(t) -> int:
    return len(dict(t.raw.__dask_graph__()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--loop", choices=["train_step", "update"], default="train_step")
    ap.add_argument("--persist", default="step", help="optimizer persist policy: step, never or N")
    args = ap.parse_args(argv)
    policy = int(args.persist) if args.persist.isdigit() else args.persist

    k1, k2, k3 = er.split(er.key(0), 3)
    model = Net(nn.Linear.init(k1, 4, 32, xp=xn), nn.Linear.init(k2, 32, 2, xp=xn))
    x = er.normal(k3, (64, 4), xp=xn)
    y = xn.astype(x[:, 0] * x[:, 1] > 0, xn.int64)
    model, x, y = ember.tree.map(lambda t: xd.asarray(t.raw), (model, x, y))
    opt = optim.Adam(1e-2, persist=policy, graph_warn=None)
    state = opt.init(model)
    loss_fn = lambda m, x, y: nn.cross_entropy(m(x), y)  # noqa: E731
    tstep = ember.training.train_step(loss_fn, opt)
    vg = ember.value_and_grad(loss_fn)

    times, tasks = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        if args.loop == "train_step":
            loss, model, state = tstep(model, state, x, y)
        else:
            loss, grads = vg(model, x, y)
            model, state = opt.update(model, grads, state)
        value = float(ember.compute(loss).raw)
        times.append(time.perf_counter() - t0)
        tasks.append((_tasks(loss), _tasks(model.hidden.weight)))

    early = statistics.median(times[5:15])
    late = statistics.median(times[-10:])
    print(f"dask MLP, {args.loop}, persist={policy!r}, {args.steps} steps, final loss {value:.4f}")
    print(f"  step time: steps 6-15 median {early * 1e3:.1f} ms, last 10 median {late * 1e3:.1f} ms, "
          f"ratio {late / early:.2f} (target <= 1.2)")
    print(f"  tasks (loss graph, hidden.weight graph): step 10 {tasks[9]}, last {tasks[-1]}; "
          f"distinct over steps 2..{args.steps}: {sorted(set(tasks[1:]))}")
    return 0 if late / early <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
