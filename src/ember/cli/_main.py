"""Entry point of the ``ember`` command, built on click.

Errors are one clear line with the fix and a non-zero exit; ``--debug``
shows the traceback.
"""

from __future__ import annotations

import sys

import click

from .._errors import EmberError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (EmberError, FileNotFoundError, ImportError, ValueError) as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"ember: error: {e}", err=True)
            sys.exit(1)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="ember")
@click.pass_context
def main(ctx, debug):
    """ember: differentiable array programming on the Python array API."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


@main.command()
def info():
    """Backends found, their versions and capabilities, and a tiny gradient on each."""
    from ._info import gather

    for row in gather():
        click.echo(f"[{row.pop('backend')}]")
        for k, v in row.items():
            click.echo(f"  {k}: {v}")
