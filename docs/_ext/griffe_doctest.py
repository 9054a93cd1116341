"""Griffe extension used by mkdocs.yml: make reST-flavoured docstrings render as Markdown.

ember's docstrings carry runnable doctests (``>>>`` lines) and Sphinx roles
(``:func:`grad```). Markdown would read ``>>> x["w"][0]`` as a reference
link and print the roles verbatim, so before rendering this extension:

- wraps each doctest block (a ``>>>`` line, its ``...`` continuations and its
  output, up to a blank line) in a ```` ```pycon ```` fence;
- turns ``:role:`name``` into ```name```.

It changes only the rendered documentation, never the source.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc|const|ref|py:\w+):`~?([^`]+)`")


def convert(text: str) -> str:
    """The docstring text with doctest blocks fenced and Sphinx roles turned into code."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line if in_fence else _ROLE.sub(r"`\1`", line))
        i += 1
    return "\n".join(out)


class DoctestFence(griffe.Extension):
    """Fence doctests and convert Sphinx roles in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: object) -> None:  # noqa: D102
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
