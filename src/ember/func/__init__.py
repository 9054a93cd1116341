"""Function transforms: grad, value_and_grad, vjp, jvp, jit, stop_gradient and more."""

from ._checkpoint import checkpoint, checkpoint_name
from ._transforms import grad, stop_gradient, value_and_grad, vjp
from ._forward import hessian, hvp, jacfwd, jacrev, jvp
from ._jit import jit
from ._vmap import vmap

__all__ = ["grad", "value_and_grad", "vjp", "stop_gradient", "checkpoint", "checkpoint_name",
           "jvp", "jacfwd", "jacrev", "hessian", "hvp", "jit", "vmap"]
