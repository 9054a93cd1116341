"""The differentiable array-API namespace over the cupy backend.

``import ember.autodiff.cupy as xp`` gives a module with every name of the
array API standard; its arrays are ember Tensors.
"""

from ._namespace import install as _install

_install(__name__, "cupy")
