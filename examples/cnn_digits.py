"""Train a small CNN on the 8x8 handwritten digits with ember (NumPy backend).

The data ship with ember (1797 images, no download; the same numbers as
scikit-learn's ``load_digits``), loaded by ``ember.data.load_digits``. Model:
``ember.data.DigitsCNN``, Conv(1->16, 3x3) - ReLU - Conv(16->32, 3x3) - ReLU -
MaxPool 2 - Linear(512->64) - ReLU - Linear(64->10), a dataclass whose
``features`` list mixes layers and functions (read its source); ``ember
train`` trains the same model. Trained with SGD + momentum written as two
``ember.tree.map`` calls. Reaches >= 97% test accuracy (about 98-99%) in
well under two minutes on 2 CPU cores.

Run: ``python examples/cnn_digits.py [--quick] [--epochs N]``
"""

from __future__ import annotations

import argparse
import time

import ember
import ember.autodiff.numpy as xp
import ember.nn as nn
import ember.random as er
import ember.tree as tree
from ember.data import DigitsCNN, accuracy, batches, load_digits


def train(epochs: int, batch: int = 64, lr: float = 0.1, momentum: float = 0.9, seed: int = 0,
          log: bool = True):
    """Train and return (model, test accuracy, seconds)."""
    x_tr, y_tr, x_te, y_te = load_digits(seed)  # images (N, 1, 8, 8) in [0, 1], int labels
    key = er.key(seed)
    key, k_init = er.split(key)
    model = DigitsCNN.init(k_init, xp=xp)  # features: [Conv2d, relu, Conv2d, relu, MaxPool2d]; head: nn.MLP
    velocity = tree.map(lambda p: p * 0.0, model)

    def loss_fn(m, xb, yb):
        return nn.cross_entropy(m(xb), yb)

    step = ember.value_and_grad(loss_fn)
    start = time.perf_counter()
    for epoch in range(epochs):
        total = 0.0
        for idx in batches(key, epoch, len(y_tr), batch):  # shuffled by fold_in(key, epoch)
            loss, g = step(model, xp.asarray(x_tr[idx]), xp.asarray(y_tr[idx]))
            velocity = tree.map(lambda v, gi: momentum * v + gi, velocity, g)
            model = tree.map(lambda p, v: p - lr * v, model, velocity)
            total += float(loss) * len(idx)
        if log:
            print(f"epoch {epoch + 1:2d}  loss {total / len(y_tr):.4f}  "
                  f"test acc {accuracy(model, x_te, y_te, xp=xp):.4f}  ({time.perf_counter() - start:.1f}s)")
    seconds = time.perf_counter() - start
    return model, accuracy(model, x_te, y_te, xp=xp), seconds


def main(argv=None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one epoch (CI smoke run)")
    p.add_argument("--epochs", type=int, default=10)
    args = p.parse_args(argv)
    model, acc, seconds = train(1 if args.quick else args.epochs)
    print(model)
    print(f"test accuracy {acc:.4f} after {seconds:.1f}s of training")
    return acc


if __name__ == "__main__":
    main()
