"""Function transforms: grad, value_and_grad, vjp, jvp, jit, vmap, stop_gradient and more; ``lax``: control flow under them."""

from ._checkpoint import checkpoint, checkpoint_name
from ._transforms import grad, stop_gradient, value_and_grad, vjp
from ._forward import hessian, hvp, jacfwd, jacrev, jvp
from ._jit import jit
from ._vmap import vmap
from . import lax

__all__ = ["grad", "value_and_grad", "vjp", "stop_gradient", "checkpoint", "checkpoint_name",
           "jvp", "jacfwd", "jacrev", "hessian", "hvp", "jit", "vmap"]
