"""The differentiable array-API namespace over the dask backend.

``import ember.autodiff.dask as xp`` gives a module with every name of the
array API standard; its arrays are ember Tensors.
"""

from ._namespace import install as _install

_install(__name__, "dask")
