"""The digits bundled with ember: complete, pickle-free, and the numbers scikit-learn ships."""

import hashlib
import zipfile
from importlib import resources

import numpy as np
import pytest

import ember.data as data
from ember.data._digits import DIGITS_FILE, _raw_digits


def test_bundled_digits_are_complete():
    images, labels = _raw_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
    assert labels.shape == (1797,) and labels.dtype == np.uint8
    assert images.min() == 0 and images.max() == 16
    # every class is present, in the proportions of the original set (174 to 183 per digit)
    counts = np.bincount(labels, minlength=10)
    assert counts.sum() == 1797 and counts.min() >= 174 and counts.max() <= 183


def test_bundled_digits_hold_no_pickled_object():
    with resources.files("ember.data").joinpath(DIGITS_FILE).open("rb") as f:
        names = zipfile.ZipFile(f).namelist()
    assert sorted(names) == ["images.npy", "labels.npy"]
    with resources.files("ember.data").joinpath(DIGITS_FILE).open("rb") as f, np.load(f) as z:
        assert all(z[k].dtype != object for k in z.files)  # np.load refuses pickles by default


def test_bundled_digits_equal_scikit_learns():
    sklearn_datasets = pytest.importorskip(
        "sklearn.datasets", reason="scikit-learn is not installed: nothing to compare the bundled copy with")
    ref = sklearn_datasets.load_digits()
    images, labels = _raw_digits()
    assert np.array_equal(images, ref.images) and np.array_equal(labels, ref.target)


def test_load_digits_split_and_scaling():
    x_tr, y_tr, x_te, y_te = data.load_digits()
    assert x_tr.shape == (1438, 1, 8, 8) and x_te.shape == (359, 1, 8, 8)
    assert x_tr.dtype == np.float32 and y_tr.dtype == np.int64
    assert float(x_tr.max()) == 1.0 and float(x_tr.min()) == 0.0
    flat = data.load_digits(images=False)
    assert np.array_equal(flat[0], x_tr.reshape(-1, 64)) and np.array_equal(flat[3], y_te)
    # the split is fixed by the seed: the test labels of seed 0 are those the loader gave when
    # it read scikit-learn's copy (so checkpoints and reported accuracies stay comparable)
    digest = hashlib.sha256(np.ascontiguousarray(y_te).tobytes()).hexdigest()
    assert digest == "355a771b4b8f42848bdc906381ea45f3840c4df9e4afd342a594c5695762aacd"
    assert not np.array_equal(data.load_digits(seed=1)[3], y_te)
