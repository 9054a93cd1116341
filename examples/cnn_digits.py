"""Train a small CNN on the 8x8 digits of scikit-learn with ember (NumPy backend).

The data ships with scikit-learn (``sklearn.datasets.load_digits``: 1797
images, no download). Model: Conv(1->16, 3x3) - ReLU - Conv(16->32, 3x3) -
ReLU - MaxPool 2 - Linear(512->64) - ReLU - Linear(64->10), trained with SGD
+ momentum written as two ``ember.tree.map`` calls. Reaches >= 97% test
accuracy (about 98-99%) in well under two minutes on 2 CPU cores.

Run: ``python examples/cnn_digits.py [--quick] [--epochs N]``
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
    """(x_train, y_train, x_test, y_test): images (N, 1, 8, 8) in [0, 1], int labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    perm = np.asarray(er.permutation(er.key(seed), len(y)))
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


class CNN(nn.Module):
    """Two convolutions, a max-pool and an MLP head."""

    features: list
    head: nn.MLP

    @classmethod
    def init(cls, key: er.Key) -> CNN:
        k1, k2, k3 = er.split(key, 3)
        features = [
            nn.Conv2d.init(k1, 1, 16, 3, padding=1, xp=xp), nn.relu,
            nn.Conv2d.init(k2, 16, 32, 3, padding=1, xp=xp), nn.relu,
            nn.MaxPool2d(2),
        ]
        return cls(features, nn.MLP.init(k3, 32 * 4 * 4, [64], 10, xp=xp))

    def __call__(self, x):
        h = nn.apply(self.features, x)
        return self.head(xp.reshape(h, (h.shape[0], -1)))


def accuracy(model, x, y, batch: int = 512) -> float:
    correct = 0
    for i in range(0, len(y), batch):
        logits = model(xp.asarray(x[i:i + batch]))
        correct += int(np.sum(np.argmax(logits.raw, axis=1) == y[i:i + batch]))
    return correct / len(y)


def train(epochs: int, batch: int = 64, lr: float = 0.1, momentum: float = 0.9, seed: int = 0,
          log: bool = True):
    """Train and return (model, test accuracy, seconds)."""
    x_tr, y_tr, x_te, y_te = load(seed)
    key = er.key(seed)
    key, k_init = er.split(key)
    model = CNN.init(k_init)
    velocity = tree.map(lambda p: p * 0.0, model)

    def loss_fn(m, xb, yb):
        return nn.cross_entropy(m(xb), yb)

    step = ember.value_and_grad(loss_fn)
    start = time.perf_counter()
    for epoch in range(epochs):
        order = np.asarray(er.permutation(er.fold_in(key, epoch), len(y_tr)))
        total = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            loss, g = step(model, xp.asarray(x_tr[idx]), xp.asarray(y_tr[idx]))
            velocity = tree.map(lambda v, gi: momentum * v + gi, velocity, g)
            model = tree.map(lambda p, v: p - lr * v, model, velocity)
            total += float(loss) * len(idx)
        if log:
            print(f"epoch {epoch + 1:2d}  loss {total / len(order):.4f}  "
                  f"test acc {accuracy(model, x_te, y_te):.4f}  ({time.perf_counter() - start:.1f}s)")
    seconds = time.perf_counter() - start
    return model, accuracy(model, x_te, y_te), seconds


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
