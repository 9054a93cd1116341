"""The ownership API for code that writes results into buffers it owns.

``ember.consume(x)`` hands a buffer over; these are the pieces an optimizer or
a fused training step uses to act on that: spend a consume marker and get the
buffer it may overwrite (:func:`take_buffer`), the backend's ufuncs that write
into it (:func:`writer`), and the tests that decide whether a buffer can be
reused (:func:`reuse_reason`, :func:`writes_in_place`, :data:`borrowed`). The
rules are the ones DESIGN.md states for ``consume``: one live handle, no view,
nothing borrowed, not saved by a tape, a backend that writes in place.
"""

from ._ownership import Owned, as_operand, reuse_reason, take_buffer, writer
from ._ownership import _backend_writes as writes_in_place
from ._ownership import _borrowed as borrowed

__all__ = ["Owned", "as_operand", "take_buffer", "writer", "reuse_reason", "writes_in_place",
           "borrowed"]
