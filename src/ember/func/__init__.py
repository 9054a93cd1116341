"""Function transforms: grad, value_and_grad, vjp, stop_gradient (and more to come)."""

from ._transforms import grad, stop_gradient, value_and_grad, vjp

__all__ = ["grad", "value_and_grad", "vjp", "stop_gradient"]
