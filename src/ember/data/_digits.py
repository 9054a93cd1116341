"""The 8x8 digits: the loader, the epoch order and the two reference models.

The data (1797 images, 10 classes) ship inside the package as ``digits.npz``:
uint8 pixels 0..16 and uint8 labels, the same numbers as scikit-learn's
``load_digits`` (origin and licence in ``DIGITS.md`` next to it), so neither a
download nor scikit-learn is needed.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Iterator

from .. import nn
from .. import random as er

#: the bundled file, a package resource next to this module
DIGITS_FILE = "digits.npz"


def _raw_digits() -> tuple[Any, Any]:
    """``(images (1797, 8, 8) uint8 in 0..16, labels (1797,) uint8)`` NumPy arrays from the
    bundled file (NumPy imported here: ``import ember`` loads no array library)."""
    import numpy as np

    with resources.files(__package__).joinpath(DIGITS_FILE).open("rb") as f, \
            np.load(f, allow_pickle=False) as z:  # numbers only: never unpickle package data
        return z["images"], z["labels"]


def load_digits(seed: int = 0, test_fraction: float = 0.2, *, images: bool = True) -> tuple[Any, Any, Any, Any]:
    """``(x_train, y_train, x_test, y_test)`` as NumPy arrays from the bundled digits.

    Images are ``(N, 1, 8, 8)`` (or ``(N, 64)`` with ``images=False``, for an
    MLP) float32 in [0, 1]; labels int64. The split is a fixed permutation
    drawn from ``ember.random.key(seed)``: the first ``test_fraction`` of it is
    the test set.
    """
    pixels, labels = _raw_digits()
    scaled = pixels / 16.0
    x = scaled.astype("float32")[:, None, :, :] if images else scaled.reshape(len(labels), 64).astype("float32")
    y = labels.astype("int64")
    perm = er.permutation(er.key(seed), len(y))
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


def batches(key: er.Key, epoch: int, n: int, batch: int) -> Iterator[Any]:
    """Index arrays of one epoch's shuffled batches of ``n`` examples (the last may be short).

    The order is ``permutation(fold_in(key, epoch), n)``: it depends only on
    ``(key, epoch)``, so a run resumed at epoch k sees the batches the
    uninterrupted run would.

    >>> import ember.random as er
    >>> [len(i) for i in batches(er.key(0), 0, 10, 4)]
    [4, 4, 2]
    """
    order = er.permutation(er.fold_in(key, epoch), n)
    for i in range(0, n, batch):
        yield order[i:i + batch]


class DigitsCNN(nn.Module):
    """Conv(1->16, 3x3) - ReLU - Conv(16->32, 3x3) - ReLU - MaxPool 2 - MLP(512->64->10).

    ``features`` is a list mixing layers and functions; the functions are
    constants of the structure and the convolution weights are parameters
    with paths such as ``features.0.weight``. Input ``(N, 1, 8, 8)``, output
    ``(N, 10)`` logits.
    """

    features: list
    head: nn.MLP

    @classmethod
    def init(cls, key: er.Key, *, xp: Any = None) -> DigitsCNN:
        """A fresh model with arrays of the namespace ``xp`` (None: NumPy)."""
        k1, k2, k3 = er.split(key, 3)
        features = [
            nn.Conv2d.init(k1, 1, 16, 3, padding=1, xp=xp), nn.relu,
            nn.Conv2d.init(k2, 16, 32, 3, padding=1, xp=xp), nn.relu,
            nn.MaxPool2d(2),
        ]
        return cls(features, nn.MLP.init(k3, 32 * 4 * 4, [64], 10, xp=xp))

    def __call__(self, x: Any) -> Any:
        h = nn.apply(self.features, x)
        xp = h.__array_namespace__()
        return self.head(xp.reshape(h, (h.shape[0], -1)))


def digits_mlp(key: er.Key, *, xp: Any = None) -> nn.MLP:
    """The digits MLP: ``nn.MLP`` 64-128-64-10 with ReLU, arrays of ``xp`` (None: NumPy).

    Its input is the flattened images, ``load_digits(images=False)``.
    """
    return nn.MLP.init(key, 64, [128, 64], 10, xp=xp)


def accuracy(model: Any, x: Any, y: Any, *, xp: Any = None, batch: int = 512) -> float:
    """Fraction of ``x`` (NumPy) whose argmax logit under ``model`` is the label ``y``.

    Evaluated in batches of ``batch`` with the ops of namespace ``xp`` (the
    model's; None: NumPy), so it runs on every backend.
    """
    if xp is None:
        from array_api_compat import array_namespace

        xp = array_namespace(x)
    correct = 0
    for i in range(0, len(y), batch):
        logits = model(xp.asarray(x[i:i + batch]))
        hit = xp.argmax(logits, axis=1) == xp.asarray(y[i:i + batch])
        correct += int(xp.sum(xp.astype(hit, xp.int64)))
    return correct / max(1, len(y))
