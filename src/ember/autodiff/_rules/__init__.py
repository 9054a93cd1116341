"""VJP rules of every differentiable primitive, one module per family.

Importing this package registers them all in :data:`RULES`.
"""

from ._base import COMPUTE, MEMORY, RULES, SELECT, Rule, defvjp, defvjp_all
from . import elementwise, reductions, manipulation, indexing, linear, pooling, normalization  # noqa: F401,E501  (registration)
from . import linalg, fft  # noqa: F401  (registration: linalg.* and fft.* rules)

__all__ = ["RULES", "Rule", "defvjp", "defvjp_all", "COMPUTE", "MEMORY", "SELECT"]
