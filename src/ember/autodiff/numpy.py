"""The differentiable array-API namespace over the numpy backend.

``import ember.autodiff.numpy as xp`` gives a module with every name of the
array API standard; its arrays are ember Tensors.
"""

import sys as _sys

from ._namespace import namespace as _namespace

_sys.modules[__name__] = _mod = _namespace("numpy", name=__name__)
for _ext in ("linalg", "fft"):
    if hasattr(_mod, _ext):
        _sys.modules[f"{__name__}.{_ext}"] = getattr(_mod, _ext)
