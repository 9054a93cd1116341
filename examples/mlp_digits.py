"""Train an MLP on the 8x8 digits of scikit-learn with ember (NumPy backend).

The data ships with scikit-learn (``sklearn.datasets.load_digits``, no
download). Model: ``nn.MLP`` 64-128-64-10 with ReLU, i.e. hidden layers as a
list of ``(Linear, relu)`` pairs; plain SGD written as
``ember.tree.map(lambda p, g: p - lr * g, model, grads)``. Reaches about 97%
test accuracy in a few seconds.

Run: ``python examples/mlp_digits.py [--quick] [--epochs N]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ember
import ember.autodiff.numpy as xp
import ember.nn as nn
import ember.random as er
import ember.tree as tree


def load(seed: int = 0, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test): flattened images in [0, 1], int labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.asarray(er.permutation(er.key(seed), len(y)))
    n_test = int(len(y) * test_fraction)
    return x[perm[n_test:]], y[perm[n_test:]], x[perm[:n_test]], y[perm[:n_test]]


def train(epochs: int, batch: int = 32, lr: float = 0.1, seed: int = 0, log: bool = True):
    """Train and return (model, test accuracy, seconds)."""
    x_tr, y_tr, x_te, y_te = load(seed)
    key, k_init = er.split(er.key(seed))
    model = nn.MLP.init(k_init, 64, [128, 64], 10, xp=xp)
    step = ember.value_and_grad(lambda m, xb, yb: nn.cross_entropy(m(xb), yb))

    def accuracy(m):
        return float(np.mean(np.argmax(m(xp.asarray(x_te)).raw, axis=1) == y_te))

    start = time.perf_counter()
    for epoch in range(epochs):
        order = np.asarray(er.permutation(er.fold_in(key, epoch), len(y_tr)))
        total = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            loss, grads = step(model, xp.asarray(x_tr[idx]), xp.asarray(y_tr[idx]))
            model = tree.map(lambda p, g: p - lr * g, model, grads)
            total += float(loss) * len(idx)
        if log and (epoch + 1) % 5 == 0:
            print(f"epoch {epoch + 1:2d}  loss {total / len(order):.4f}  test acc {accuracy(model):.4f}")
    return model, accuracy(model), time.perf_counter() - start


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
