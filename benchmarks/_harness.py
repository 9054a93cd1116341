"""Tiny interleaved benchmark runner used by the scripts in ``benchmarks/``.

Why not ``timeit`` or pytest-benchmark: we compare *several implementations
of one workload* (NumPy, ember, torch, JAX, ...) and want the numbers to be
robust against machine drift.  So every implementation of a workload is run
round-robin: in each of R rounds, each implementation runs one timed batch of
n calls (n auto-sized so that a batch takes about ``target`` seconds).  We
report the median over rounds of the time per call (divided by
``Workload.ops_per_call`` when the unit is per op) and its ratio against a
reference implementation.

Threads are limited to one (BLAS through threadpoolctl, torch; XLA and
OpenMP through :func:`configure_env`), and the
OpenBLAS tuning variables ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` are
removed by re-executing the script (see :func:`reexec_clean_env`); the
``benchmarks/run`` wrapper does the same with ``env -u``.

Example::

    from _harness import Workload, run_cli
    w = Workload("add", "us/call", {"numpy": lambda: (lambda: a + a)},
                 reference="numpy")
    run_cli([w])
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"

#: Environment variables that change OpenBLAS kernel choice; removed on re-exec.
UNSET_ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
#: Thread-count variables set to 1 for single-threaded kernels.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_REEXEC_MARK = "_EMBER_BENCH_REEXEC"

_UNIT_SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}

MSG_BAD_UNIT = (
    "Workload {name!r}: unit {unit!r} is not understood; use '<s|ms|us|ns>/<word>', "
    "e.g. 'us/op' or 'ms/step'."
)
MSG_BAD_REFERENCE = (
    "Workload {name!r}: reference {ref!r} is not one of its implementations {impls}; "
    "pass one of those names or None."
)
NA_PREFIX = "n/a"
#: Confidence level of the intervals reported next to medians and ratios.
CI_LEVEL = 0.95


class Skip(Exception):
    """Raised by a setup function to skip an implementation with a reason.

    Why: a peer (torch, jax...) or ember itself may be missing or incomplete;
    the benchmark should report ``name: n/a (reason)`` instead of failing.
    """


@dataclasses.dataclass
class Workload:
    """One benchmark: several implementations of the same computation.

    ``impls`` maps an implementation name to a *setup function* that takes no
    argument and returns the zero-argument callable to time.  Setup may raise
    :class:`Skip` or ``ImportError`` to skip the implementation.
    ``ops_per_call`` divides the per-call time (e.g. 100 for a chain of 100
    ops reported in ``us/op``).  ``ratios`` lists extra ``(numerator,
    denominator)`` pairs to print, e.g. ``("ember-grad", "torch")``.
    ``rounds`` replaces the default of 7 rounds (``--rounds`` and ``--quick``
    still win) for a workload whose ratios need more rounds to settle.
    """

    name: str
    unit: str
    impls: dict[str, Callable[[], Callable[[], Any]]]
    reference: str | None = None
    ops_per_call: float = 1.0
    description: str = ""
    ratios: Sequence[tuple[str, str]] = ()
    warmup: int = 3
    rounds: int | None = None

    def __post_init__(self) -> None:
        _unit_scale(self.unit, self.name)
        if self.reference is not None and self.reference not in self.impls:
            raise ValueError(
                MSG_BAD_REFERENCE.format(name=self.name, ref=self.reference, impls=list(self.impls))
            )


def _unit_scale(unit: str, name: str = "?") -> float:
    prefix = unit.split("/", 1)[0].strip()
    if prefix not in _UNIT_SCALE:
        raise ValueError(MSG_BAD_UNIT.format(name=name, unit=unit))
    return _UNIT_SCALE[prefix]


# --------------------------------------------------------------------------- env


def reexec_clean_env() -> None:
    """Re-execute this script without the OpenBLAS tuning variables.

    Why: ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` are read once at library
    load, so they must be absent from the process environment from the start.
    Call this first in a script's ``__main__`` block.
    """
    if os.environ.get(_REEXEC_MARK):
        return
    if not any(v in os.environ for v in UNSET_ENV_VARS):
        return
    env = {k: v for k, v in os.environ.items() if k not in UNSET_ENV_VARS}
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def configure_env() -> None:
    """Ask for single-threaded kernels from libraries imported from now on.

    Why: torch and XLA read these at import; BLAS already loaded is handled
    by :func:`limit_threads`.  Call it in a script's ``__main__`` block (it is
    not run on import so that importing the harness has no side effects).
    """
    for var in THREAD_ENV_VARS:
        os.environ.setdefault(var, "1")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # ember's opt-in malloc tuning (freed memory kept for the next step), for every peer alike
    os.environ.setdefault("EMBER_MALLOC_TRIM_THRESHOLD", str(256 << 20))


def ensure_src_on_path() -> None:
    """Make ``import ember`` work from a checkout without installation."""
    if importlib.util.find_spec("ember") is None:
        src = REPO_ROOT / "src"
        if (src / "ember").is_dir():
            sys.path.insert(0, str(src))


def limit_threads() -> None:
    """Limit BLAS/OpenMP pools of every *loaded* library and torch to 1 thread.

    Called again after each setup because threadpoolctl only sees libraries
    that are loaded at call time.  :func:`restore_threads` undoes it.
    """
    try:
        import threadpoolctl
    except ImportError:
        pass
    else:
        _RESTORE.append(threadpoolctl.threadpool_limits(limits=1).restore_original_limits)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        old = torch.get_num_threads()
        _RESTORE.append(lambda: torch.set_num_threads(old))
        torch.set_num_threads(1)


def restore_threads() -> None:
    """Undo every :func:`limit_threads` (newest first)."""
    while _RESTORE:
        _RESTORE.pop()()


_RESTORE: list[Callable[[], Any]] = []


def optional_import(module: str) -> Any:
    """Import ``module`` or raise :class:`Skip` saying it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Skip(f"{module} not installed: {exc}") from exc


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "ember", "torch", "jax", "autograd", "mygrad"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = str(getattr(m, "__version__", "?"))
    return out


# ------------------------------------------------------------------------ timing


def _time_batch(fn: Callable[[], Any], n: int) -> float:
    """Seconds for ``n`` calls of ``fn`` (gc collected before, left enabled).

    GC stays enabled on purpose: autodiff graphs create garbage and collecting
    it is part of their real cost.
    """
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - t0


def _calibrate(fn: Callable[[], Any], target: float) -> int:
    """Number of calls so that one batch takes about ``target`` seconds."""
    n = 1
    while True:
        dt = _time_batch(fn, n)
        if dt >= target / 5 or n >= 1 << 24:
            break
        n *= 4 if dt < target / 50 else 2
    per_call = dt / n
    return max(1, round(target / per_call)) if per_call > 0 else n


@dataclasses.dataclass
class ImplResult:
    """Timing (in the workload's unit) or the reason it was not measured."""

    name: str
    status: str  # "ok", "skipped" or "error"
    note: str = ""
    n: int = 0
    samples: list[float] = dataclasses.field(default_factory=list)
    median: float | None = None
    min: float | None = None
    max: float | None = None
    ratio: float | None = None
    median_ci: tuple[float, float] | None = None  # CI_LEVEL confidence interval of the median
    ratio_ci: tuple[float, float] | None = None  # ... of the ratio vs the reference

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class WorkloadResult:
    """All implementations of one workload, plus the extra ratios."""

    workload: Workload
    impls: dict[str, ImplResult]
    rounds: int
    target_s: float
    extra_ratios: dict[str, float | None]
    extra_ci: dict[str, tuple[float, float] | None] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        w = self.workload
        return {
            "name": w.name,
            "description": w.description,
            "unit": w.unit,
            "ops_per_call": w.ops_per_call,
            "reference": w.reference,
            "rounds": self.rounds,
            "target_batch_s": self.target_s,
            "statistic": "median over rounds of per-call time; ratios: median of per-round ratios",
            "ci": f"{CI_LEVEL:.0%} distribution-free confidence interval of each median (order statistics)",
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "versions": _versions(),
            "results": {k: v.as_dict() for k, v in self.impls.items()},
            "ratios": self.extra_ratios,
            "ratio_ci": self.extra_ci,
        }


def median_ci(samples: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float] | None:
    """A confidence interval of the median of ``samples``, free of any distribution assumption.

    The ``k``-th smallest and ``k``-th largest sample, with ``k`` the largest
    rank that still covers the median with probability ``level`` (the number
    of samples below the median is Binomial(n, 1/2)). None when there are too
    few samples for that level (fewer than 6 at 95%). Why: on a shared VM one
    run's median moves by several percent, so a ratio 1% over its target says
    little until one sees how wide its interval is.

    >>> median_ci(range(1, 26))  # the 8th and the 18th of 25
    (8, 18)
    """
    xs = sorted(samples)
    n = len(xs)
    tail = (1.0 - level) / 2
    cdf = 0.0
    k = 0
    while k < n:
        p = math.comb(n, k) / 2.0 ** n
        if cdf + p > tail:
            break
        cdf += p
        k += 1
    if k == 0:
        return None
    return xs[k - 1], xs[n - k]


def _pairs(impls: dict[str, ImplResult], num: str, den: str) -> list[float] | None:
    """``num``'s time / ``den``'s time, per round; None if either has no timings."""
    a, b = impls.get(num), impls.get(den)
    if a is None or b is None or a.median is None or not b.median:
        return None
    return [x / y for x, y in zip(a.samples, b.samples) if y]


def _ratio(impls: dict[str, ImplResult], num: str, den: str) -> float | None:
    """Median over rounds of ``num``'s time / ``den``'s time in the same round.

    Why not the ratio of the medians: a shared machine's speed drifts across
    rounds; the two batches of one round ran within a second of each other,
    so their ratio cancels most of the drift.
    """
    pairs = _pairs(impls, num, den)
    if pairs is None:
        return None
    return statistics.median(pairs) if pairs else impls[num].median / impls[den].median


def _ratio_ci(impls: dict[str, ImplResult], num: str, den: str) -> tuple[float, float] | None:
    """The confidence interval of :func:`_ratio` (of the median of the per-round ratios)."""
    pairs = _pairs(impls, num, den)
    return median_ci(pairs) if pairs else None


def run_workload(w: Workload, rounds: int = 7, target: float = 0.1) -> WorkloadResult:
    """Set up every implementation, then time them interleaved for ``rounds``."""
    scale = _unit_scale(w.unit, w.name) / w.ops_per_call
    results: dict[str, ImplResult] = {}
    fns: dict[str, Callable[[], Any]] = {}
    for name, setup in w.impls.items():
        try:
            fn = setup()
            limit_threads()
            for _ in range(max(1, w.warmup)):
                fn()
        except (Skip, ImportError) as exc:
            results[name] = ImplResult(name, "skipped", str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - report, keep benchmarking others
            results[name] = ImplResult(name, "error", f"{type(exc).__name__}: {exc}")
            continue
        fns[name] = fn
        results[name] = ImplResult(name, "ok", n=_calibrate(fn, target))

    names = sorted(fns, key=lambda n: n != w.reference)  # the reference first, else as listed
    for r in range(rounds):
        # Forward, then backward order: no implementation always runs right after the same
        # other, and the reference (listed first) runs right next to the one after it in
        # every round, so that ratio compares batches a fraction of a second apart.
        for name in names[:] if r % 2 == 0 else names[::-1]:
            res = results[name]
            try:
                dt = _time_batch(fns[name], res.n)
            except Exception as exc:  # noqa: BLE001
                res.status, res.note = "error", f"{type(exc).__name__}: {exc}"
                del fns[name]
                names.remove(name)
                continue
            res.samples.append(dt / res.n * scale)

    for res in results.values():
        if res.status == "ok" and res.samples:
            res.median = statistics.median(res.samples)
            res.min, res.max = min(res.samples), max(res.samples)
            res.median_ci = median_ci(res.samples)
    if w.reference is not None:
        for res in results.values():
            res.ratio = _ratio(results, res.name, w.reference)
            res.ratio_ci = _ratio_ci(results, res.name, w.reference)
    extra = {f"{a} / {b}": _ratio(results, a, b) for a, b in w.ratios}
    extra_ci = {f"{a} / {b}": _ratio_ci(results, a, b) for a, b in w.ratios}
    return WorkloadResult(w, results, rounds, target, extra, extra_ci)


# ------------------------------------------------------------------------ output


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def format_table(res: WorkloadResult) -> str:
    """Human-readable table: one row per implementation, then extra ratios."""
    w = res.workload
    ref = w.reference
    width = max([len(n) for n in res.impls] + [4])
    head = f"{w.name}: {w.description}" if w.description else w.name
    lines = [
        head,
        f"  [{w.unit}, median of {res.rounds} rounds" + (f", ratio vs {ref}]" if ref else "]"),
        f"  {'impl':<{width}}  {'median':>10}  {'min':>10}  {'max':>10}  {'ratio':>8}  {'n/batch':>8}",
    ]
    for r in res.impls.values():
        if r.status != "ok":
            lines.append(f"  {r.name:<{width}}  {NA_PREFIX} ({r.note})")
            continue
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        lines.append(
            f"  {r.name:<{width}}  {_fmt(r.median):>10}  {_fmt(r.min):>10}  {_fmt(r.max):>10}"
            f"  {ratio:>8}  {r.n:>8}"
        )
    for label, val in res.extra_ratios.items():
        ci = res.extra_ci.get(label)
        text = NA_PREFIX if val is None else f"{val:.2f}x" + (
            f" ({CI_LEVEL:.0%} CI {ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        lines.append(f"  ratio {label}: {text}")
    return "\n".join(lines)


def write_json(res: WorkloadResult, results_dir: Path | None = None) -> Path:
    """Write ``<results_dir>/<workload name>.json`` and return its path."""
    out_dir = Path(results_dir) if results_dir is not None else RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{res.workload.name}.json"
    path.write_text(json.dumps(res.as_dict(), indent=2, sort_keys=False) + "\n")
    return path


def parse_args(argv: Sequence[str] | None = None, description: str = "") -> argparse.Namespace:
    """Common flags: --quick, --rounds, --target, --only, --results-dir, --no-json."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="3 rounds of ~10 ms batches (CI smoke)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 7 or the workload's own, quick 3)")
    p.add_argument("--target", type=float, default=None, help="seconds per batch (default 0.1)")
    p.add_argument("--only", default=None, help="comma-separated implementation names to run")
    p.add_argument("--results-dir", type=Path, default=None, help="where JSON results go")
    p.add_argument("--no-json", action="store_true", help="do not write JSON results")
    return p.parse_args(argv)


def run_cli(
    workloads: Sequence[Workload], argv: Sequence[str] | None = None, description: str = ""
) -> list[WorkloadResult]:
    """Parse flags, run each workload, print its table and write its JSON."""
    args = parse_args(argv, description)
    target = args.target or (0.01 if args.quick else 0.1)
    only = set(args.only.split(",")) if args.only else None
    limit_threads()
    try:
        return [
            _run_one(w, args, args.rounds or (3 if args.quick else w.rounds or 7), target, only)
            for w in workloads
        ]
    finally:
        restore_threads()


def _run_one(
    w: Workload, args: argparse.Namespace, rounds: int, target: float, only: set[str] | None
) -> WorkloadResult:
    """Filter by --only, run, print the table, write the JSON."""
    if only is not None:
        impls = {k: v for k, v in w.impls.items() if k in only}
        ref = w.reference if w.reference in impls else None
        w = dataclasses.replace(w, impls=impls, reference=ref)
    res = run_workload(w, rounds=rounds, target=target)
    print(format_table(res), flush=True)
    if not args.no_json:
        print(f"  -> {write_json(res, args.results_dir)}", flush=True)
    print(flush=True)
    return res
