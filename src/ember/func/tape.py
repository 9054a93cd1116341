"""The steps of a reverse-mode transform, for fused training steps (``ember.training``).

``value_and_grad`` is :func:`forward_backward` (record ``f``, run the backward
pass) followed by :func:`gradients` (each leaf's gradient in its own form). A
fused step calls the first and takes the leaves' cotangents straight from
their tape nodes, so an optimizer can write into their buffers.
"""

from ._transforms import _check_options as check_options
from ._transforms import _gradients as gradients
from ._transforms import forward_backward, leaf_gradient
from ..autodiff._trace import active_traces as _active


def under_transform() -> bool:
    """Whether an outer transform (or ``ember.jit`` staging) records what runs now."""
    return bool(_active)

__all__ = ["forward_backward", "gradients", "leaf_gradient", "check_options", "under_transform"]
