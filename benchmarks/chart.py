"""Draw ``results/benchmarks.png`` from the JSON files in ``benchmarks/results/``.

Why: ratios are easier to read as bars. One panel per workload shows each
implementation's median time relative to the workload's reference
(log scale, lower is better, ember in red); if ``summary.json`` is there, a
first panel shows each acceptance value as a fraction of its target
(green when <= 1).

    python benchmarks/chart.py [--results-dir DIR] [--out PNG]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"


def _load(results_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(harness workload documents sorted by name, summary or None)."""
    workloads = []
    summary = None
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        if path.name == "summary.json":
            summary = data
            continue
        res = data.get("results")
        if isinstance(res, dict) and res and all(isinstance(r, dict) and "median" in r for r in res.values()):
            workloads.append(data)
    return workloads, summary


def _relative(w: dict[str, Any]) -> tuple[dict[str, float], str]:
    """Median of each implementation relative to the reference (or to the fastest)."""
    med = {k: r["median"] for k, r in w["results"].items() if r.get("median")}
    ref = w.get("reference")
    if not med:
        return {}, ""
    if ref not in med:
        ref = min(med, key=med.get)
    return {k: v / med[ref] for k, v in med.items()}, ref


def make_chart(results_dir: Path = RESULTS_DIR, out: Path | None = None) -> Path | None:
    """Write the PNG; returns its path, or None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    out = Path(out) if out is not None else Path(results_dir) / "benchmarks.png"
    workloads, summary = _load(Path(results_dir))
    panels: list[tuple[str, dict[str, float], dict[str, str], float]] = []
    if summary and summary.get("acceptance"):
        vals, colors = {}, {}
        for a in summary["acceptance"]:
            if a.get("value") is not None and a.get("target"):
                vals[a["label"]] = a["value"] / a["target"]
                colors[a["label"]] = "tab:green" if a["value"] <= a["target"] else "tab:red"
        if vals:
            panels.append(("acceptance: measured / target (<= 1 passes)", vals, colors, 1.0))
    for w in workloads:
        rel, ref = _relative(w)
        if rel:
            colors = {k: "tab:red" if k.startswith("ember") else "tab:gray" for k in rel}
            title = f"{w['name']} ({w.get('unit', '')}): time / {ref}, lower is better"
            panels.append((title, rel, colors, 1.0))
    if not panels:
        return None
    heights = [0.6 + 0.28 * len(p[1]) for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, sum(heights) + 0.3 * len(panels)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (title, vals, colors, line) in zip(axes[:, 0], panels):
        names = list(vals)
        ax.barh(names, [vals[n] for n in names], color=[colors[n] for n in names])
        ax.axvline(line, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        lo = min(min(vals.values()), line)
        hi = max(max(vals.values()), line)
        ax.set_xlim(lo / 1.5, hi * 3.0)
        for i, n in enumerate(names):
            ax.text(vals[n] * 1.05, i, f"{vals[n]:.2f}x", va="center", fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
    if summary and summary.get("load_average") is not None:
        first = axes[0, 0]
        first.set_title(f"{first.get_title()}\nload average {summary['load_average']}"
                        f" on {summary.get('cpu_count')} CPUs", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--out", type=Path, default=None, help="PNG path (default RESULTS_DIR/benchmarks.png)")
    a = p.parse_args(argv)
    path = make_chart(a.results_dir, a.out)
    print(path if path else "nothing to draw: no results JSON in " + str(a.results_dir))
    return 0 if path else 1


if __name__ == "__main__":
    sys.exit(main())
