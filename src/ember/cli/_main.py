"""Entry point of the ``ember`` command, built on click.

Errors are one clear line with the fix and a non-zero exit (1 for a failed
job, 2 for a wrong command line); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._errors import EmberError

#: Exceptions shown as one line (anything else is a bug: full traceback).
_USER_ERRORS = (EmberError, FileNotFoundError, NotADirectoryError, PermissionError, ImportError, ValueError)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class _Group(click.Group):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(argv, prog_name or "ember", complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("ember: aborted", err=True)
            sys.exit(130)
        except click.UsageError as e:
            cmd = e.ctx.command_path if e.ctx is not None else "ember"
            click.echo(f"ember: error: {_one_line(e.format_message())} (see '{cmd} --help')", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"ember: error: {_one_line(e.format_message())}", err=True)
            sys.exit(e.exit_code)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _USER_ERRORS as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"ember: error: {_one_line(e)}", err=True)
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
    """Backends found, their versions and capabilities, a tiny gradient on each, and ember's
    configuration."""
    from .._config import get_config, malloc_tunable
    from ._info import gather

    for row in gather():
        click.echo(f"[{row.pop('backend')}]")
        for k, v in row.items():
            click.echo(f"  {k}: {v}")
    click.echo("[config]  (ember.config)")
    for k, v in get_config().items():
        click.echo(f"  {k}: {v}")
    click.echo("  malloc: " + ("glibc (malloc_trim_threshold applies)" if malloc_tunable()
                            else "not glibc: left as it is"))


@main.command()
@click.option("--backend", default="numpy", show_default=True,
              help="numpy, dask, cupy or array_api_strict.")
@click.option("--model", default=None, help="mlp or cnn  [default: cnn, or the resumed run's]")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="Total epochs (a resumed run continues up to it).  [default: 8; --quick: 2]")
@click.option("--checkpointing", type=click.Choice(["none", "balanced"]), default="none", show_default=True,
              help="Autodiff checkpointing strategy.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for checkpoint.safetensors and curves.png.  [default: ember-runs/MODEL-BACKEND, "
                   "or the --resume directory]")
@click.option("--resume", type=click.Path(path_type=Path), default=None,
              help="Continue from the checkpoint in this directory.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the init, split and batch order.")
@click.option("--quick", is_flag=True, help="Smoke run: a slice of the data, 2 epochs.")
def train(backend, model, epochs, checkpointing, out, resume, seed, quick):
    """Train a digits classifier (bundled data, no download); checkpoint + curves PNG."""
    from ._train import run_train

    run_train(backend=backend, model=model, epochs=epochs, checkpointing=checkpointing,
              out=out, resume=resume, seed=seed, quick=quick)


@main.command()
@click.option("--quick", is_flag=True, help="3 short rounds per implementation (a smoke run).")
@click.option("--script", "scripts", multiple=True,
              help="Benchmark script to run (repeatable).  [default: overhead, mlp, conv]")
@click.option("--only", default=None, help="Comma-separated implementations to run, e.g. numpy,ember,torch.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("ember-bench"),
              show_default=True, help="Directory for the JSON results and bench.png.")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="ember source checkout holding benchmarks/ (default: found from the package or cwd).")
@click.option("--all", "every", is_flag=True,
              help="Every script through benchmarks/all.py (about 20 minutes; --script narrows it), "
                   "with issue 12's acceptance table and the README's tables in OUT/summary.md.")
def bench(quick, scripts, only, out, repo, every):
    """Run the benchmarks; print ratios against the installed peers; write a PNG chart."""
    from ._bench import run_bench

    sys.exit(run_bench(quick=quick, scripts=scripts, only=only, out=out, repo=repo, every=every))


@main.command()
@click.argument("namespaces", nargs=-1, required=True)
@click.option("--version", "spec_version", default=None, help="Spec version (2024.12 or 2025.12).")
@click.option("--max-examples", type=int, default=None, help="Hypothesis examples per test.")
@click.option("--suite", type=click.Path(path_type=Path), default=None,
              help="array-api-tests checkout (default $ARRAY_API_TESTS_DIR).")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="ember source checkout holding conformance/ (default: found from the package or cwd).")
def conformance(namespaces, spec_version, max_examples, suite, repo):
    """Run the array-API conformance suite on each NAMESPACE (wraps conformance/run).

    Example: ember conformance ember.autodiff.numpy array_api_strict --max-examples 20
    """
    from ._conformance import run_conformance

    sys.exit(run_conformance(namespaces, version=spec_version, max_examples=max_examples,
                             suite=suite, repo=repo))
