"""The differentiable array-API namespace over the array_api_strict backend.

``import ember.autodiff.array_api_strict as xp`` gives a module with every name of the
array API standard; its arrays are ember Tensors.
"""

from ._namespace import install as _install

_install(__name__, "array_api_strict")
