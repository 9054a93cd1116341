"""``ember bench``: run the repository's benchmark scripts, tabulate ratios, draw a chart.

Each script (``benchmarks/<name>.py``) runs in its own process with a clean,
single-threaded environment, exactly as ``benchmarks/run`` does, and writes
one JSON file per workload into ``OUT/results``. This module then reads those
files, prints one table of per-implementation ratios against each workload's
reference (NumPy where there is one) and writes ``OUT/bench.png``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import _repo
from ._console import make_console, print_table
from ._files import write_atomic

DEFAULT_SCRIPTS = ("overhead", "mlp", "conv")
MARKER = "benchmarks/_harness.py"
UNKNOWN_SCRIPT = "unknown benchmark script {name!r}; available: {known} (e.g. --script overhead)"
SCRIPT_FAILED = "benchmarks/{name}.py exited with status {rc}; its output is in {log}"


def _env(repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    src = str(repo / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def available_scripts(repo: Path) -> list[str]:
    """Benchmark scripts of the checkout that use the shared harness (``run_cli``)."""
    out = []
    for p in sorted((repo / "benchmarks").glob("*.py")):
        if not p.name.startswith("_") and "run_cli(" in p.read_text(errors="replace"):
            out.append(p.stem)
    return out


def load_results(results_dir: Path) -> list[dict[str, Any]]:
    """Every workload JSON written by the harness into ``results_dir``, sorted by name."""
    return [json.loads(p.read_text()) for p in sorted(Path(results_dir).glob("*.json"))]


def rows(results: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    """``(workload, implementation, median + unit, ratio, note)`` per implementation."""
    out = []
    for w in results:
        for name, r in w["results"].items():
            if r.get("median") is None:
                out.append((w["name"], name, "-", "-", f"n/a ({r.get('note', '')})"))
                continue
            ratio = f"{r['ratio']:.2f}x" if r.get("ratio") is not None else "-"
            out.append((w["name"], name, f"{r['median']:.3g} {w['unit']}", ratio, ""))
    return out


def _ratio_label(v: float, _pos: Any = None) -> str:
    """An axis or bar label for a ratio: ``0.6x``, ``1x``, ``12x`` (never ``6x10^-1``)."""
    return f"{v:.2g}x" if v < 10 else f"{v:.0f}x"


def chart(results: list[dict[str, Any]]) -> Any:
    """The bench chart as a matplotlib ``Figure``, or None without ratios to draw.

    One panel per workload: a horizontal bar per implementation, its length
    the ratio of its time to the workload's reference (below 1: faster than
    the reference), its value written at its end, and a line at 1. The axis
    is logarithmic only when the ratios span more than a factor of 10, and
    its ticks are plain ratios (``0.5x``, ``1x``, ``2x``).
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    data = [(w, {k: r["ratio"] for k, r in w["results"].items() if r.get("ratio")}) for w in results]
    data = [(w, d) for w, d in data if d]
    if not data:
        return None
    fig = Figure(figsize=(7.5, 1.0 + 0.35 * sum(len(d) for _, d in data) + 0.6 * len(data)))
    axes = fig.subplots(len(data), 1, squeeze=False)
    for ax, (w, d) in zip(axes[:, 0], data):
        names = list(d)
        values = [d[n] for n in names]
        colors = ["tab:red" if n.startswith("ember") else "tab:gray" for n in names]
        bars = ax.barh(names, values, color=colors)
        ax.bar_label(bars, labels=[_ratio_label(v) for v in values], padding=3, fontsize=8)
        ax.axvline(1.0, color="black", linewidth=0.8)
        lo, hi = min(values + [1.0]), max(values + [1.0])
        if hi / lo > 10:
            ax.set_xscale("log")
            ticks = [m * 10.0 ** e for e in range(-6, 7) for m in (1, 2, 5)]
            ax.xaxis.set_major_locator(FixedLocator([t for t in ticks if lo / 2 <= t <= hi * 2]))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlim(lo / 1.5, hi * 3)  # room for the value labels
        else:
            ax.set_xlim(0, hi * 1.25)
        ax.xaxis.set_major_formatter(FuncFormatter(_ratio_label))
        ax.invert_yaxis()
        ax.set_title(f"{w['name']}: time / {w['reference']} time (lower is better)", fontsize=9)
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    return fig


def plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    """Write :func:`chart` as a PNG at ``path`` (atomically); None without data."""
    fig = chart(results)
    if fig is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))


def run_bench(
    *,
    quick: bool = False,
    scripts: tuple[str, ...] | list[str] = (),
    only: str | None = None,
    out: Path = Path("ember-bench"),
    repo: Path | None = None,
    every: bool = False,
) -> int:
    """``ember bench``: run ``scripts`` (default: overhead, mlp, conv), print ratios, write a chart.

    With ``every`` it runs ``benchmarks/all.py`` instead (every script unless
    ``scripts`` names some), which also prints each performance target with
    its measured ratio and verdict and writes the tables to ``OUT/summary.md``. Returns the exit status: 0 when
    every script ran, 1 otherwise.
    """
    from rich.table import Table

    console = make_console()
    root = _repo.find(MARKER, repo)
    known = available_scripts(root)
    for s in scripts:
        if s not in known:
            raise ValueError(UNKNOWN_SCRIPT.format(name=s, known=", ".join(known)))
    if every:
        return _run_all(console, root, quick, scripts, only, Path(out))
    scripts = list(scripts) or [s for s in DEFAULT_SCRIPTS if s in known]
    out = Path(out)
    results_dir = out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    for old in results_dir.glob("*.json"):
        old.unlink()
    status = 0
    for s in scripts:
        cmd = [sys.executable, str(root / "benchmarks" / f"{s}.py"), "--results-dir", str(results_dir)]
        if quick:
            cmd.append("--quick")
        if only:
            cmd += ["--only", only]
        log = out / f"{s}.log"
        with console.status(f"benchmarks/{s}.py{' --quick' if quick else ''} ..."):
            proc = subprocess.run(cmd, cwd=root / "benchmarks", env=_env(root),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log.write_text(proc.stdout)
        if proc.returncode != 0:
            console.print(SCRIPT_FAILED.format(name=s, rc=proc.returncode, log=log))
            status = 1
        else:
            console.print(f"benchmarks/{s}.py done (full output: {log})")

    results = load_results(results_dir)
    console.print("ember bench: median time per call, and its ratio to each workload's reference "
                  "(below 1x: faster than the reference)")
    table = Table()
    for col in ("workload", "implementation", "median", "ratio", "note"):
        table.add_column(col, overflow="fold")
    for r in rows(results):
        table.add_row(*r)
    print_table(console, table)
    for w in results:
        for label, v in (w.get("ratios") or {}).items():
            console.print(f"  {w['name']}: {label} = " + (f"{v:.2f}x" if v is not None else "n/a"))
    try:
        png = plot(results, out / "bench.png")
    except ImportError:
        console.print('chart skipped: matplotlib is not installed '
                      '(pip install -e ".[cli]" in the ember checkout)')
    else:
        console.print(f"chart: {png}" if png else "chart skipped: no ratios to draw")
    console.print(f"results: {results_dir}")
    return status


def _run_all(console: Any, root: Path, quick: bool, scripts: Any, only: str | None, out: Path) -> int:
    """``benchmarks/all.py`` into ``out`` (its output streamed), then its table of performance targets."""
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "summary.md"
    summary.unlink(missing_ok=True)  # (a run that fails before its summary shows no older one)
    cmd = [sys.executable, str(root / "benchmarks" / "all.py"), "--results-dir", str(out.resolve())]
    if quick:
        cmd.append("--quick")
    if scripts:
        cmd += ["--scripts", ",".join(scripts)]
    if only:
        cmd += ["--only", only]
    status = subprocess.run(cmd, cwd=root / "benchmarks", env=_env(root)).returncode
    if summary.is_file():
        text = summary.read_text()
        console.print(text.split("\n\n")[0], soft_wrap=True, markup=False)  # the performance targets met or not
        console.print(f"performance tables: {summary}")
    return 1 if status else 0
