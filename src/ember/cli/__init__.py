"""The ``ember`` command (also ``python -m ember``)."""

from ._main import main

__all__ = ["main"]
