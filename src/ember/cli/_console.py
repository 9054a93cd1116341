"""The rich console the ``ember`` commands print through.

Why: rich wraps long lines at the terminal's width, and when stdout is not a
terminal (a pipe, a log file, CI) it assumes 80 columns, which broke paths in
two in every log. Piped output is therefore soft-wrapped (rich inserts no
line breaks; the reader's pager wraps, or not) and tables are drawn at their
natural width.
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_console", "print_table"]

#: Widest a table may grow when stdout is not a terminal (no terminal to fit).
_PIPED_TABLE_WIDTH = 1000


def make_console(**kwargs: Any):
    """A ``rich.console.Console`` on stdout: no syntax highlighting; soft wrap when not a terminal."""
    from rich.console import Console

    console = Console(highlight=False, **kwargs)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def print_table(console: Any, table: Any) -> None:
    """Print a rich table: fitted to the terminal, or at its natural width when piped."""
    if console.is_terminal:
        console.print(table)
        return
    width = console.measure(table, options=console.options.update_width(_PIPED_TABLE_WIDTH)).maximum
    console.print(table, width=width, soft_wrap=False)
