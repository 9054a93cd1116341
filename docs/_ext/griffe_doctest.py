"""Griffe extension used by mkdocs.yml: make ember's docstrings and signatures render well.

ember's docstrings carry runnable doctests (``>>>`` lines) and Sphinx roles
(``:func:`grad```). Markdown would read ``>>> x["w"][0]`` as a reference
link (or a run of ``>`` as nested quotes) and print the roles verbatim, so
before rendering this extension:

- wraps each doctest block (a ``>>>`` line, its ``...`` continuations and its
  output, up to a blank line) in a ```` ```pycon ```` fence, in every
  docstring including a package's own;
- turns ``:role:`name``` into ```name``` and a reST literal-block marker
  (``e.g.::`` before an indented block) into a plain colon;
- drops the value of instance attributes (``self.missing = missing`` would
  render as ``missing = missing``: the right-hand side of an assignment in
  ``__init__`` tells a reader nothing);
- drops an ``__init__(self, *args, **kwargs)`` from a class's rendered
  signature: such a class (``Tensor``) is not constructed by calling it,
  and its docstring says how to get one instead.

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
        if not in_fence:
            line = _ROLE.sub(r"`\1`", line)
            if line.endswith("::") and not line.endswith(":::"):  # reST literal block: Markdown
                line = line[:-1]  # reads the indented block after it as code already
        out.append(line)
        i += 1
    return "\n".join(out)


def _convert_docstring(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = convert(obj.docstring.value)


def _says_nothing(init: griffe.Object) -> bool:
    """True for ``__init__(self, *args, **kwargs)``: no parameter a caller could use."""
    kinds = [p.kind for p in init.parameters][1:]  # after self
    return kinds == [griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword]


def _tidy(obj: griffe.Object) -> None:
    if obj.is_attribute and "instance-attribute" in obj.labels:
        obj.value = None
    elif obj.is_class and "__init__" in obj.members:
        init = obj.members["__init__"]
        if not init.is_alias and init.is_function and _says_nothing(init):
            obj.del_member("__init__")


class DoctestFence(griffe.Extension):
    """Fence doctests, convert Sphinx roles and tidy signatures of everything griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: object) -> None:  # noqa: D102
        _convert_docstring(obj)
        _tidy(obj)

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:  # noqa: D102
        # griffe runs on_object for a package's members only, not for the package itself
        _convert_docstring(pkg)
