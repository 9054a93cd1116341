"""ember.io: save and load any structure as one safetensors file (never pickle).

Arrays are stored under their ember path (``encoder.layers.0.weight``) by the
``safetensors`` library; the structure, constants and static fields go as JSON
into the file's metadata, so a model, its optimizer state, or both together
come back as they were. Functions in a model (activations) are stored by a
registered name (:func:`register_function`), never pickled.
Writes are atomic; every file read is checked, and a bad file raises
:class:`FileFormatError`; a file that does not fit ``like`` raises
:class:`LoadMismatchError` naming every differing path.

>>> import numpy as np, ember.io, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
>>> ember.io.save(path, {"step": 3, "params": {"encoder.w": {"m": np.zeros(2), "v": np.ones(2)}}})
>>> ember.io.load(path)["params"]["encoder.w"]["v"]
array([1., 1.])
"""

from __future__ import annotations

from ember._errors import FileFormatError
from ember.io._functions import register_function
from ember.io._load import LoadMismatchError, load, read_metadata
from ember.io._save import save
from ember.io._torch import load_state_dict

__all__ = [
    "FileFormatError",
    "LoadMismatchError",
    "load",
    "load_state_dict",
    "read_metadata",
    "register_function",
    "save",
]
