"""The ``ember`` command (also ``python -m ember``)."""

#: the one line printed when the command's own dependencies (the ``cli`` extra) are missing
NO_CLI = ('ember: the command needs the cli extra ({missing} is not installed): '
          'pip install -e ".[cli]" in the ember checkout')

try:
    from ._main import main
except ModuleNotFoundError as _missing:
    if _missing.name not in ("click", "rich", "matplotlib"):
        raise
    _NAME = _missing.name

    def main() -> None:
        """Say which extra to install, in one line, instead of a traceback."""
        raise SystemExit(NO_CLI.format(missing=_NAME))

__all__ = ["main", "NO_CLI"]
