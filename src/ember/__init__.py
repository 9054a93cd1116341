"""ember: differentiable array programming on the Python array API standard.

>>> import ember, ember.autodiff.numpy as xp
>>> ember.grad(lambda x: xp.sum(x ** 2))(xp.asarray([1.0, 2.0])).raw.tolist()
[2.0, 4.0]
"""

from ._errors import (
    AxisError,
    BatchingError,
    VmapFallbackWarning,
    BackendError,
    BackendNotInstalledError,
    ConsumedError,
    DTypeError,
    EmberError,
    FileFormatError,
    NotDifferentiableError,
    OutOfRangeError,
    ReadOnlyError,
    ReuseError,
    ShapeError,
    StructureError,
    TracingError,
    RetraceWarning,
)
from . import autodiff, backend, tree
from .autodiff import Primitive, Tensor, primitive
from .func import (
    checkpoint,
    checkpoint_name,
    grad,
    hessian,
    hvp,
    jacfwd,
    jacrev,
    jit,
    jvp,
    stop_gradient,
    value_and_grad,
    vjp,
    vmap,
)
from .func import lax
from .tree import field
from ._compute import compute, persist
from . import nn, random, io, optim, training, distributed, data
from .training import train_step
from ._transfer import to_backend
from ._config import config
from .autodiff._ownership import HiddenCopyWarning, clone, consume, share

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "backend",
    "tree",
    "Tensor",
    "primitive",
    "Primitive",
    "grad",
    "value_and_grad",
    "vjp",
    "vmap",
    "stop_gradient",
    "jvp",
    "jacfwd",
    "jacrev",
    "hessian",
    "hvp",
    "jit",
    "lax",
    "TracingError",
    "RetraceWarning",
    "checkpoint",
    "checkpoint_name",
    "compute",
    "persist",
    "to_backend",
    "consume",
    "share",
    "clone",
    "config",
    "HiddenCopyWarning",
    "field",
    "autodiff",
    "nn",
    "random",
    "io",
    "optim",
    "training",
    "train_step",
    "distributed",
    "data",
    "EmberError",
    "ShapeError",
    "AxisError",
    "BatchingError",
    "VmapFallbackWarning",
    "OutOfRangeError",
    "ReadOnlyError",
    "DTypeError",
    "BackendError",
    "BackendNotInstalledError",
    "StructureError",
    "NotDifferentiableError",
    "ConsumedError",
    "ReuseError",
    "FileFormatError",
]
