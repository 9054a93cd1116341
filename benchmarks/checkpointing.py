"""Checkpointing: peak memory and time of a gradient, per strategy, against peers.

Why: checkpointing trades compute for memory; this script measures both
sides of the trade on three workloads (issue 8 targets in brackets):

- ``checkpointing_chain``: 64 layers ``x = tanh(x) * w_i`` on a 10M float32
  vector (``--size``, ``--layers``), gradient w.r.t. x and every w_i.
  ``ember-region8`` (``ember.checkpoint`` over segments of 8 layers) and
  ``ember-segments`` (``checkpointing="segments"``) [peak <= 30% of
  ``ember-none`` at <= 1.7x its time]; ``ember-balanced`` for contrast (a
  chain of memory-bound ops: recomputed in one go, no saving at the peak).
  Peers: hand-written NumPy backward keeping everything (``numpy-none``) and
  in segments of 8 (``numpy-segments``); torch eager (``torch-none``),
  ``torch.utils.checkpoint`` per layer (``torch-ckpt-layer``) and per 8
  layers (``torch-ckpt-seg8``).
- ``checkpointing_mlp``: MLP with 8 hidden layers of 512 (ReLU), batch 2048, float32,
  and ``checkpointing_transformer``: one pre-LN transformer block (attention +
  GELU MLP), batch 4 x 256 tokens x 256, float32: ``ember-balanced`` keeps
  only compute-bound (matmul) results [<= 60% of ``none``'s activation memory
  at <= 1.25x its time].

Memory is the peak of memory allocated during one gradient call above what was
allocated before it (inputs and parameters), i.e. activations, tape and
gradients: measured with ``tracemalloc`` (which sees NumPy's buffers) for
NumPy and ember, and as the growth of the peak RSS (``ru_maxrss``) of a fresh
subprocess for torch (tracemalloc does not see torch's allocator). Memory
ratios compare each row with the ``none`` row of the same library. Times come
from the interleaved harness (``_harness.py``); at 10M elements a call takes
seconds, so the chain uses 2 rounds unless ``--rounds`` is given.

Run: ``benchmarks/run checkpointing [--quick] [--size N]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
from _harness import (
    RESULTS_DIR,
    Skip,
    Workload,
    configure_env,
    format_table,
    limit_threads,
    optional_import,
    reexec_clean_env,
    restore_threads,
    run_workload,
    write_json,
)
from overhead import import_ember

LAYERS = 64
SIZE = 10_000_000
SEG = 8


# --------------------------------------------------------------------------- chain
def _chain_inputs(size: int, layers: int):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, size).astype(np.float32)
    ws = [np.asarray(0.9 + 0.2 * rng.random(), dtype=np.float32) for _ in range(layers)]
    return x, ws


def _ember_chain(mode: str, size: int, layers: int) -> Callable[[], Any]:
    ember, xp = import_ember()
    x0, ws0 = _chain_inputs(size, layers)
    x, ws = xp.asarray(x0), [xp.asarray(w) for w in ws0]

    def layers_fn(x, ws):
        for w in ws:
            x = xp.tanh(x) * w
        return x

    if mode == "region8":
        from ember.func import checkpoint

        seg = checkpoint(layers_fn)

        def f(ws, x):
            for s in range(0, len(ws), SEG):
                x = seg(x, ws[s:s + SEG])
            return xp.sum(x)

        g = ember.grad(f, argnums=(0, 1))
    else:
        g = ember.grad(lambda ws, x: xp.sum(layers_fn(x, ws)), argnums=(0, 1), checkpointing=mode)
    return lambda: g(ws, x)


def _numpy_chain(mode: str, size: int, layers: int) -> Callable[[], Any]:
    x0, ws = _chain_inputs(size, layers)

    def forward(x, ws, keep):
        ts = []
        for w in ws:
            t = np.tanh(x)
            x = t * w
            if keep:
                ts.append(t)
        return x, ts

    def backward(g, ws, ts, gws):
        for i in range(len(ws) - 1, -1, -1):
            t = ts[i]
            gws[i] = np.sum(g * t)
            g = g * ws[i]
            g = g * (1 - t * t)
        return g

    def grad_none():
        _, ts = forward(x0, ws, True)
        gws = [None] * len(ws)
        g = backward(np.ones_like(x0), ws, ts, gws)
        return gws, g

    def grad_segments():
        bounds = []
        x = x0
        for s in range(0, len(ws), SEG):
            bounds.append(x)
            x, _ = forward(x, ws[s:s + SEG], False)
        gws = [None] * len(ws)
        g = np.ones_like(x0)
        for k in range(len(bounds) - 1, -1, -1):
            s = k * SEG
            _, ts = forward(bounds[k], ws[s:s + SEG], True)
            sub = [None] * len(ts)
            g = backward(g, ws[s:s + SEG], ts, sub)
            gws[s:s + SEG] = sub
            del ts
        return gws, g

    return grad_none if mode == "none" else grad_segments


def _torch_chain(mode: str, size: int, layers: int) -> Callable[[], Any]:
    torch = optional_import("torch")
    from torch.utils.checkpoint import checkpoint as tcheck

    x0, ws0 = _chain_inputs(size, layers)
    x = torch.from_numpy(x0).requires_grad_(True)
    ws = [torch.tensor(float(w), dtype=torch.float32, requires_grad=True) for w in ws0]

    def layers_fn(x, *ws):
        for w in ws:
            x = torch.tanh(x) * w
        return x

    def step():
        for t in (x, *ws):
            t.grad = None
        h = x
        if mode == "none":
            h = layers_fn(h, *ws)
        else:
            n = 1 if mode == "ckpt-layer" else SEG
            for s in range(0, len(ws), n):
                h = tcheck(layers_fn, h, *ws[s:s + n], use_reentrant=False)
        h.sum().backward()
        return x.grad

    return step


CHAIN_IMPLS = {
    "ember-none": lambda n, L: _ember_chain("none", n, L),
    "ember-segments": lambda n, L: _ember_chain("segments", n, L),
    "ember-region8": lambda n, L: _ember_chain("region8", n, L),
    "ember-balanced": lambda n, L: _ember_chain("balanced", n, L),
    "numpy-none": lambda n, L: _numpy_chain("none", n, L),
    "numpy-segments": lambda n, L: _numpy_chain("segments", n, L),
    "torch-none": lambda n, L: _torch_chain("none", n, L),
    "torch-ckpt-layer": lambda n, L: _torch_chain("ckpt-layer", n, L),
    "torch-ckpt-seg8": lambda n, L: _torch_chain("ckpt-seg8", n, L),
}


# --------------------------------------------------------------------------- mlp, transformer
def _mlp_problem():
    rng = np.random.default_rng(0)
    sizes = (512,) * 9 + (10,)
    params = [
        {"W": (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32),
         "b": np.zeros(b, np.float32)}
        for a, b in zip(sizes[:-1], sizes[1:])
    ]
    x = rng.standard_normal((2048, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], 2048)]
    return params, x, y


def _mlp_loss(xp):
    def loss(params, x, y):
        h = x
        for i, p in enumerate(params):
            h = h @ p["W"] + p["b"]
            if i < len(params) - 1:
                h = xp.maximum(h, 0.0)
        zs = h - xp.max(h, axis=1, keepdims=True)
        logp = zs - xp.log(xp.sum(xp.exp(zs), axis=1, keepdims=True))
        return -xp.sum(y * logp) / x.shape[0]

    return loss


def _tf_problem():
    rng = np.random.default_rng(0)
    d, hidden = 256, 1024
    s = 1 / np.sqrt(d)

    def m(a, b, scale):
        return (rng.standard_normal((a, b)) * scale).astype(np.float32)

    params = {"wq": m(d, d, s), "wk": m(d, d, s), "wv": m(d, d, s), "wo": m(d, d, s),
              "w1": m(d, hidden, s), "w2": m(hidden, d, 1 / np.sqrt(hidden)),
              "g1": np.ones(d, np.float32), "b1": np.zeros(d, np.float32),
              "g2": np.ones(d, np.float32), "b2": np.zeros(d, np.float32)}
    x = rng.standard_normal((4, 256, d)).astype(np.float32)
    return params, x


def _tf_loss(xp):
    def ln(x, g, b):
        mu = xp.mean(x, axis=-1, keepdims=True)
        xc = x - mu
        var = xp.mean(xc * xc, axis=-1, keepdims=True)
        return xc / xp.sqrt(var + 1e-5) * g + b

    def loss(p, x):
        h = ln(x, p["g1"], p["b1"])
        q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
        s = (q @ xp.matrix_transpose(k)) * (1.0 / 16.0)
        s = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
        a = s / xp.sum(s, axis=-1, keepdims=True)
        x = x + (a @ v) @ p["wo"]
        h = ln(x, p["g2"], p["b2"]) @ p["w1"]
        h = 0.5 * h * (1.0 + xp.tanh(0.7978846 * (h + 0.044715 * (h * h * h))))
        y = x + h @ p["w2"]
        return xp.sum(y * y) / y.size

    return loss


def _model_args(model: str):
    ember, xp = import_ember()
    if model == "mlp":
        params, x, y = _mlp_problem()
        args = (params, x, y)
        loss = _mlp_loss(xp)
    else:
        params, x = _tf_problem()
        args = (params, x)
        loss = _tf_loss(xp)
    return loss, tuple(ember.tree.map(xp.asarray, a) for a in args)


def _ember_model(model: str, mode: str) -> Callable[[], Any]:
    ember, _ = import_ember()
    loss, args = _model_args(model)
    g = ember.value_and_grad(loss, checkpointing=mode)
    return lambda: g(*args)


def _kept_for_backward(model: str) -> dict[str, int]:
    """Bytes the tape keeps for backward after the forward pass (activation memory)."""
    import ember.autodiff as ad

    loss, args = _model_args(model)
    rep = ad.memory_report(loss, args[0], *args[1:])
    return {f"ember-{k}": r.total_bytes for k, r in rep.strategies.items()}


MODEL_IMPLS = {
    "ember-none": lambda model: _ember_model(model, "none"),
    "ember-balanced": lambda model: _ember_model(model, "balanced"),
    "ember-segments": lambda model: _ember_model(model, "segments"),
}


# --------------------------------------------------------------------------- memory
def _tracemalloc_peak(fn: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
        del out
    finally:
        tracemalloc.stop()
    return peak


def _rss_peak_subprocess(impl: str, size: int, layers: int) -> int:
    """Peak RSS growth of one call of ``impl`` in a fresh interpreter (bytes)."""
    cmd = [sys.executable, __file__, "--_rss", impl, "--size", str(size), "--layers", str(layers)]
    # A fixed mmap threshold makes glibc return freed large buffers to the OS, so
    # the RSS peak follows the live allocations (the default threshold adapts).
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise Skip((out.stderr.strip().splitlines() or ["subprocess failed"])[-1])
    peak = int(out.stdout.strip().splitlines()[-1])
    if peak <= 0:
        raise Skip("RSS did not grow (measurement failed; rerun)")
    return peak


def _status_bytes(field: str) -> int:
    """A size from ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def _rss_child(impl: str, size: int, layers: int) -> None:
    fn = CHAIN_IMPLS[impl](size, layers)
    limit_threads()
    gc.collect()
    # Linux starts a child's ru_maxrss at its parent's RSS (kept across fork and exec), so
    # after a parent that held gigabytes the call's peak may not raise it ("did not grow").
    # Resetting the peak (clear_refs "5", Linux >= 4.0) measures this process alone.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before, peak = _status_bytes("VmRSS"), lambda: _status_bytes("VmHWM")
    except OSError:  # elsewhere: the high-water mark, as good as the parent allows
        def peak() -> int:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

        before = peak()
    fn()
    print(peak() - before)


def _memory_table(title: str, peaks: dict[str, Any], groups: dict[str, str]) -> list[str]:
    lines = [f"{title}: peak memory of one gradient call above its inputs"]
    for name, peak in peaks.items():
        if isinstance(peak, str):
            lines.append(f"  {name:<18} n/a ({peak})")
            continue
        base = peaks.get(groups.get(name, ""))
        ratio = f"{100 * peak / base:6.1f}% of {groups[name]}" if isinstance(base, int) and base else ""
        lines.append(f"  {name:<18} {peak / 2**20:10.1f} MiB  {ratio}")
    return lines


def _measure(impls: dict[str, Callable[[], Callable[[], Any]]], torch_rss=None) -> dict[str, Any]:
    peaks: dict[str, Any] = {}
    for name, setup in impls.items():
        try:
            if name.startswith("torch"):
                peaks[name] = torch_rss(name)
                continue
            fn = setup()
            fn()  # warm (imports, caches) outside the measurement
            peaks[name] = _tracemalloc_peak(fn)
            del fn
        except (Skip, ImportError) as exc:
            peaks[name] = str(exc)
        except Exception as exc:  # noqa: BLE001 - report and go on
            peaks[name] = f"{type(exc).__name__}: {exc}"
        gc.collect()
    return peaks


def _group(name: str) -> str:
    return name.split("-")[0] + "-none"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1M elements, 1 round of small batches")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--target", type=float, default=None)
    p.add_argument("--only", default=None, help="comma-separated implementation names")
    p.add_argument("--results-dir", type=Path, default=None)
    p.add_argument("--no-json", action="store_true")
    p.add_argument("--size", type=int, default=None, help=f"chain length of x (default {SIZE})")
    p.add_argument("--layers", type=int, default=LAYERS)
    p.add_argument("--workloads", default="chain,mlp,transformer")
    p.add_argument("--_rss", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    size = a.size or (1_000_000 if a.quick else SIZE)
    if a._rss:
        _rss_child(a._rss, size, a.layers)
        return
    only = set(a.only.split(",")) if a.only else None
    which = a.workloads.split(",")
    summary: dict[str, Any] = {}
    limit_threads()
    try:
        if "chain" in which:
            impls = {k: (lambda k=k: CHAIN_IMPLS[k](size, a.layers)) for k in CHAIN_IMPLS
                     if only is None or k in only}
            peaks = _measure(impls, torch_rss=lambda k: _rss_peak_subprocess(k, size, a.layers))
            groups = {k: _group(k) for k in peaks}
            print("\n".join(_memory_table(f"checkpointing_chain ({a.layers} layers, {size} float32)",
                                          peaks, groups)), flush=True)
            w = Workload(
                "checkpointing_chain", "s/call", impls,
                reference="ember-none" if "ember-none" in impls else None,
                description=f"{a.layers} x (tanh(x) * w_i) on {size} float32, grad w.r.t. x and w",
                ratios=[(k, _group(k)) for k in impls if not k.endswith("-none")],
                warmup=1,
            )
            rounds = a.rounds or (1 if a.quick else 2)
            res = run_workload(w, rounds=rounds, target=a.target or 0.01)
            print(format_table(res), flush=True)
            summary["checkpointing_chain"] = {"memory_bytes": peaks, "groups": groups,
                                              "time": res.as_dict()}
            if not a.no_json:
                write_json(res, a.results_dir)
        for model in ("mlp", "transformer"):
            if model not in which:
                continue
            impls = {k: (lambda k=k, m=model: MODEL_IMPLS[k](m)) for k in MODEL_IMPLS
                     if only is None or k in only}
            peaks = _measure(impls)
            groups = {k: "ember-none" for k in peaks}
            name = f"checkpointing_{model}"
            print("\n".join(_memory_table(name, peaks, groups)), flush=True)
            kept = _kept_for_backward(model)
            lines = _memory_table(name, kept, {k: "ember-none" for k in kept})
            lines[0] = f"{name}: activation memory (what the tape keeps for backward, memory_report)"
            print("\n".join(lines), flush=True)
            w = Workload(name, "ms/call", impls,
                         reference="ember-none" if "ember-none" in impls else None,
                         description=f"{model}: value_and_grad, float32", warmup=2)
            res = run_workload(w, rounds=a.rounds or (3 if a.quick else 7),
                               target=a.target or (0.05 if a.quick else 0.5))
            print(format_table(res), flush=True)
            summary[name] = {"memory_bytes": peaks, "kept_for_backward_bytes": kept, "groups": groups,
                             "time": res.as_dict()}
            if not a.no_json:
                write_json(res, a.results_dir)
    finally:
        restore_threads()
    if not a.no_json:
        out = Path(a.results_dir) if a.results_dir else RESULTS_DIR
        out.mkdir(parents=True, exist_ok=True)
        path = out / "checkpointing_memory.json"
        path.write_text(json.dumps({k: {m: v[m] for m in v if m != "time"}
                                    for k, v in summary.items()}, indent=2) + "\n")
        print(f"  -> {path}")


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    main(sys.argv[1:])
