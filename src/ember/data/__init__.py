"""ember.data: small bundled datasets and the reference models trained on them.

Why: the examples (``examples/mlp_digits.py``, ``examples/cnn_digits.py``)
and ``ember train`` train the same models on the same data; they share the
definitions here so the tutorials and the command cannot drift apart.

Today this is the 8x8 digits (1797 images, bundled with the package: no
download, no scikit-learn):
:func:`load_digits` splits them 80/20 with a fixed key, :func:`batches`
gives an epoch's shuffled batches (reproducible from ``(key, epoch)``),
:class:`DigitsCNN` and :func:`digits_mlp` build the two models and
:func:`accuracy` scores them on any backend.

>>> import ember.data as data, ember.random as er
>>> x_tr, y_tr, x_te, y_te = data.load_digits(images=False)
>>> x_tr.shape, x_te.shape
((1438, 64), (359, 64))
>>> model = data.digits_mlp(er.key(0))
>>> 0.0 <= data.accuracy(model, x_te, y_te) <= 1.0
True
"""

from ._digits import DigitsCNN, accuracy, batches, digits_mlp, load_digits

__all__ = ["load_digits", "batches", "DigitsCNN", "digits_mlp", "accuracy"]
