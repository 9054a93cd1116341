"""The differentiable array-API namespace over the numpy backend.

``import ember.autodiff.numpy as xp`` gives a module with every name of the
array API standard; its arrays are ember Tensors.
"""

from ._namespace import install as _install

_install(__name__, "numpy")
