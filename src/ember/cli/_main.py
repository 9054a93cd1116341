"""Entry point of the ``ember`` command, built on click.

Errors are one clear line with the fix and a non-zero exit (1 for a failed
job, 2 for a wrong command line, 130 for Ctrl-C); ``--debug`` shows the
traceback. A bare ``ember`` prints the help.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._errors import EmberError

#: Exceptions shown as one line (anything else is a bug: full traceback). OSError covers the
#: machine's state (a full disk, a read-only mount), which no traceback helps with.
_USER_ERRORS = (EmberError, OSError, ImportError, ValueError)

ABORTED = "ember: aborted"


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class _Group(click.Group):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(argv, prog_name or "ember", complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.NoArgsIsHelpError as e:  # a bare `ember`: the help, as `--help` shows it
            click.echo(e.ctx.get_help())
            sys.exit(0)
        except click.Abort as e:
            # Ctrl-C; a command may say in the interrupt's message how to pick up where it stopped
            why = e.__cause__
            hint = str(why) if isinstance(why, KeyboardInterrupt) else ""
            click.echo(f"{ABORTED}: {hint}" if hint else ABORTED, err=True)
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


def _known(kind: str):
    """A click callback: an unknown backend or model is a usage error (exit 2) with the choices."""

    def check(ctx, param, value):
        from . import _train

        known, text = ((_train.BACKENDS, _train.UNKNOWN_BACKEND) if kind == "backend"
                       else (_train.MODELS, _train.UNKNOWN_MODEL))
        if value is not None and value not in known:
            raise click.BadParameter(text.format(name=value, known=", ".join(known)))
        return value

    return check


@main.command()
@click.option("--backend", default="numpy", show_default=True, callback=_known("backend"),
              help="numpy, dask, cupy or array_api_strict.")
@click.option("--model", default=None, callback=_known("model"),
              help="mlp or cnn  [default: cnn, or the resumed run's]")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="Total epochs (a resumed run continues up to it).  [default: 8; --quick: 2]")
@click.option("--checkpointing", type=click.Choice(["none", "balanced"]), default="none", show_default=True,
              help="Autodiff checkpointing strategy.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for checkpoint.safetensors and curves.png.  [default: ember-runs/MODEL-BACKEND, "
                   "or the --resume directory]")
@click.option("--resume", type=click.Path(path_type=Path), default=None,
              help="Continue from the checkpoint in this directory.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed of the init, split and batch order.  [default: 0, or the resumed run's]")
@click.option("--quick", is_flag=True,
              help="Smoke run: a slice of the data, 2 epochs (checks the setup; the accuracy means nothing).")
def train(backend, model, epochs, checkpointing, out, resume, seed, quick):
    """Train a digits classifier (bundled data, no download); checkpoint + curves PNG every epoch.

    Ctrl-C stops it and prints the --resume command that continues from the last finished epoch.
    """
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
              help="Every script through benchmarks/all.py (about 20 minutes; --script narrows it); "
                   "prints each performance target with its measured ratio, confidence interval and "
                   "verdict, and writes the performance tables to OUT/summary.md.")
def bench(quick, scripts, only, out, repo, every):
    """Time ember against NumPy and the installed peers; print the ratios; chart them in OUT/bench.png.

    Needs ember's source checkout (benchmarks/ is not in the package).
    """
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
