"""Train an MLP on the 8x8 handwritten digits with ember (NumPy backend).

The data ship with ember (1797 images, no download; the same numbers as
scikit-learn's ``load_digits``), loaded by ``ember.data.load_digits``. Model:
``ember.data.digits_mlp``, an ``nn.MLP`` 64-128-64-10 with ReLU, i.e. hidden
layers as a list of ``(Linear, relu)`` pairs (``ember train --model mlp``
trains the same one); plain SGD written as
``ember.tree.map(lambda p, g: p - lr * g, model, grads)``. Reaches about 97%
test accuracy in a few seconds.

Run: ``python examples/mlp_digits.py [--quick] [--epochs N]``
"""

from __future__ import annotations

import argparse
import time

import ember
import ember.autodiff.numpy as xp
import ember.nn as nn
import ember.random as er
import ember.tree as tree
from ember.data import accuracy, batches, digits_mlp, load_digits


def train(epochs: int, batch: int = 32, lr: float = 0.1, seed: int = 0, log: bool = True):
    """Train and return (model, test accuracy, seconds)."""
    x_tr, y_tr, x_te, y_te = load_digits(seed, images=False)  # (N, 64) pixels in [0, 1], int labels
    key, k_init = er.split(er.key(seed))
    model = digits_mlp(k_init, xp=xp)  # nn.MLP.init(k_init, 64, [128, 64], 10, xp=xp)
    step = ember.value_and_grad(lambda m, xb, yb: nn.cross_entropy(m(xb), yb))

    start = time.perf_counter()
    for epoch in range(epochs):
        total = 0.0
        for idx in batches(key, epoch, len(y_tr), batch):  # shuffled by fold_in(key, epoch)
            loss, grads = step(model, xp.asarray(x_tr[idx]), xp.asarray(y_tr[idx]))
            model = tree.map(lambda p, g: p - lr * g, model, grads)
            total += float(loss) * len(idx)
        if log and (epoch + 1) % 5 == 0:
            print(f"epoch {epoch + 1:2d}  loss {total / len(y_tr):.4f}  "
                  f"test acc {accuracy(model, x_te, y_te, xp=xp):.4f}")
    return model, accuracy(model, x_te, y_te, xp=xp), time.perf_counter() - start


def main(argv=None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two epochs (CI smoke run)")
    p.add_argument("--epochs", type=int, default=30)
    args = p.parse_args(argv)
    model, acc, seconds = train(2 if args.quick else args.epochs)
    print(nn.summary(model))
    print(f"test accuracy {acc:.4f} after {seconds:.1f}s of training")
    return acc


if __name__ == "__main__":
    main()
