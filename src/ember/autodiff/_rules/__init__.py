"""VJP rules of every differentiable primitive, one module per family.

Importing this package registers them all in :data:`RULES`.
"""

from ._base import COMPUTE, MEMORY, RULES, SELECT, Rule, defvjp, defvjp_all
from . import elementwise, reductions, manipulation, indexing, linear  # noqa: F401  (registration)

__all__ = ["RULES", "Rule", "defvjp", "defvjp_all", "COMPUTE", "MEMORY", "SELECT"]
