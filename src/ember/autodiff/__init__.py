"""Differentiable array-API namespaces, the Tensor type and the tape.

``import ember.autodiff.numpy as xp`` gives the NumPy-backed namespace
(also ``.array_api_strict``, ``.dask``, ``.cupy``); ``namespace(raw_xp)``
builds one for any other array-API backend.
"""

from ._namespace import namespace
from ._rules import COMPUTE, MEMORY, RULES, Rule, defvjp, defvjp_all
from ._rules._base import defjvp
from ._rules._base import Spec
from ._rules._util import fit as unbroadcast
from ._tensor import Tensor, raw_value
from ._trace import Trace
from ._checkpoint import memory_report
from ._primitive import Primitive, primitive
from . import _batch_rules  # noqa: F401  (fills the batching rules table)
from . import fused
from ._jvp import forward_trace, leaf as track_forward, tangent_of
from ._numbers import TracedNumber, host_call, is_traced_number

__all__ = ["namespace", "Tensor", "Trace", "RULES", "Rule", "defvjp", "defvjp_all", "Spec", "COMPUTE", "MEMORY", "memory_report",
           "primitive", "Primitive", "fused", "unbroadcast", "defjvp", "forward_trace",
           "track_forward", "tangent_of",
           "raw_value", "TracedNumber", "host_call", "is_traced_number"]
