"""Smoke test for benchmarks/_harness.py: runs, tabulates, writes JSON. No timing asserts."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import statistics
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(autouse=True)
def _restore_ember_config():
    """The benchmarks opt into ember's process tuning (``_peers.ember_ready``): give the rest of
    the test process its own configuration back."""
    import ember

    with ember.config(**ember._config.get_config()):
        yield


@pytest.fixture(scope="module")
def harness():
    name = "_ember_bench_harness"
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / "_harness.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look the module up while the file runs
    spec.loader.exec_module(mod)
    return mod


def _workload(harness, calls):
    def make(name):
        def setup():
            def fn():
                calls[name] = calls.get(name, 0) + 1
                return sum(range(50))

            return fn

        return setup

    def missing():
        raise harness.Skip("peer not installed")

    def broken():
        raise RuntimeError("boom")

    return harness.Workload(
        name="smoke",
        unit="us/op",
        impls={"ref": make("ref"), "other": make("other"), "missing": missing, "broken": broken},
        reference="ref",
        ops_per_call=10,
        description="trivial",
        ratios=[("other", "ref"), ("missing", "ref")],
        warmup=1,
    )


def test_quick_run_table_and_json(harness, tmp_path, capsys):
    calls: dict[str, int] = {}
    w = _workload(harness, calls)
    (res,) = harness.run_cli([w], ["--quick", "--target", "0.002", "--results-dir", str(tmp_path)])

    # Both real impls ran: warmup + calibration + 3 rounds.
    assert calls["ref"] > 3 and calls["other"] > 3
    ok = res.impls["ref"]
    assert ok.status == "ok" and len(ok.samples) == 3 and ok.n >= 1
    assert ok.min <= ok.median <= ok.max
    assert ok.ratio == pytest.approx(1.0)
    # a ratio is the median of the per-round ratios (same-round batches cancel the drift)
    per_round = [a / b for a, b in zip(res.impls["other"].samples, ok.samples)]
    assert res.impls["other"].ratio == pytest.approx(statistics.median(per_round))
    assert res.impls["missing"].status == "skipped"
    assert res.impls["broken"].status == "error" and "boom" in res.impls["broken"].note
    assert res.extra_ratios["missing / ref"] is None

    out = capsys.readouterr().out
    assert "smoke: trivial" in out and "us/op" in out
    assert "missing" in out and "n/a (peer not installed)" in out
    assert "ratio other / ref:" in out

    data = json.loads((tmp_path / "smoke.json").read_text())
    assert data["name"] == "smoke" and data["unit"] == "us/op" and data["rounds"] == 3
    assert data["reference"] == "ref" and data["ops_per_call"] == 10
    assert set(data["results"]) == {"ref", "other", "missing", "broken"}
    r = data["results"]["other"]
    assert r["status"] == "ok" and len(r["samples"]) == 3 and r["median"] > 0
    assert data["results"]["missing"]["median"] is None
    assert "other / ref" in data["ratios"]


def _binom_below(n, k):
    """P(Binomial(n, 1/2) < k)."""
    return sum(math.comb(n, i) for i in range(k)) / 2 ** n


@pytest.mark.parametrize("n", range(1, 80))
def test_median_ci_is_the_narrowest_order_statistics_that_cover_the_level(harness, n):
    xs = [float(v) for v in range(n)]  # the ranks 0..n-1, shuffled
    random.Random(n).shuffle(xs)
    ci = harness.median_ci(xs)
    if n < 6:  # even (min, max) covers the median with probability below 95% (1 - 2/2**n)
        assert ci is None
        return
    lo, hi = ci
    k = int(lo) + 1  # the interval is (k-th smallest, k-th largest)
    assert hi == n - k
    assert 1 - 2 * _binom_below(n, k) >= 0.95  # covers the level...
    assert 1 - 2 * _binom_below(n, k + 1) < 0.95  # ...and one rank narrower would not


def test_rounds_give_ratio_intervals_around_the_ratio(harness, tmp_path):
    w = _workload(harness, {})
    w.ratios = [("other", "ref")]
    (res,) = harness.run_cli([w], ["--rounds", "7", "--target", "0.001", "--results-dir", str(tmp_path)])
    pairs = sorted(a / b for a, b in zip(res.impls["other"].samples, res.impls["ref"].samples))
    lo, hi = res.extra_ci["other / ref"]
    assert (lo, hi) == (pairs[0], pairs[-1])  # 7 rounds: the whole range is the 95% interval
    assert lo <= res.extra_ratios["other / ref"] <= hi
    assert res.impls["other"].ratio_ci == (lo, hi)
    assert res.impls["ref"].median_ci == (min(res.impls["ref"].samples), max(res.impls["ref"].samples))
    data = json.loads((tmp_path / "smoke.json").read_text())
    assert data["ratio_ci"]["other / ref"] == [lo, hi] and data["results"]["other"]["ratio_ci"] == [lo, hi]


def test_only_filter_drops_reference(harness, tmp_path):
    w = _workload(harness, {})
    (res,) = harness.run_cli([w], ["--quick", "--target", "0.001", "--only", "other", "--no-json"])
    assert list(res.impls) == ["other"]
    assert res.workload.reference is None and res.impls["other"].ratio is None
    assert not (tmp_path / "smoke.json").exists()


def test_bad_unit_and_reference_are_rejected(harness):
    with pytest.raises(ValueError, match="unit"):
        harness.Workload("w", "parsecs", {"a": lambda: lambda: None})
    with pytest.raises(ValueError, match="reference"):
        harness.Workload("w", "ms/step", {"a": lambda: lambda: None}, reference="b")


# --------------------------------------------------------------------------
# The workload scripts (cnn, transformer, graph, long_chain, higher_order) at
# tiny sizes, ember implementations only (peers' imports are slow), and the
# summary/chart of all.py / chart.py. Only shapes of the output are checked.


def _load_script(name, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # scripts import _harness / overhead
    mod_name = f"_ember_bench_{name}"
    spec = importlib.util.spec_from_file_location(mod_name, BENCH_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod


_TINY = "--quick --target 0.001 --rounds 1".split()


def _check_json(path, name, unit, impls):
    data = json.loads(path.read_text())
    assert data["name"] == name and data["unit"] == unit and data["rounds"] == 1
    assert set(data["results"]) == set(impls)
    for impl in impls:
        r = data["results"][impl]
        assert r["status"] == "ok", f"{name}/{impl}: {r['note']}"
        assert len(r["samples"]) == 1 and r["median"] > 0 and r["n"] >= 1
    return data


@pytest.mark.parametrize(
    ("script", "make", "only", "unit"),
    [
        ("cnn", lambda m: m.workloads(batch=2, image=8), "ember", "ms/step"),
        ("transformer", lambda m: m.workloads(batch=2, seq=4, dim=8, heads=2, hidden=16), "ember",
         "ms/step"),
        ("graph", lambda m: m.workloads(n_ops=40), "numpy,ember-grad", "us/op"),
        ("higher_order", lambda m: m.workloads(peers=("ember",)), "ember-grad,ember-grad2", "us/op"),
        ("forward_mode", lambda m: m.workloads()[:1], "ember-forward,ember-jvp", "us/op"),
        ("forward_mode", lambda m: m.workloads()[1:], "ember-forward,ember-jvp", "ms/call"),
        ("vmap", lambda m: m.workloads(batch=4), "ember-vmap,ember-loop", "ms/call"),
        ("jit", lambda m: m.workloads()[:1], "ember-jit,ember-grad,numpy", "us/op"),
    ],
)
def test_workload_scripts_tiny(script, make, only, unit, tmp_path, monkeypatch):
    mod = _load_script(script, monkeypatch)
    (w,) = make(mod)
    (res,) = mod.run_cli([w], [*_TINY, "--only", only, "--results-dir", str(tmp_path)])
    data = _check_json(tmp_path / f"{w.name}.json", w.name, unit, only.split(","))
    assert data["ops_per_call"] == w.ops_per_call
    assert all(v is None or v > 0 for v in data["ratios"].values())


def test_long_chain_main_tiny(tmp_path, monkeypatch):
    mod = _load_script("long_chain", monkeypatch)
    mod.main(["--length", "1000", "--target", "0.001", "--rounds", "1", "--only",
              "ember-1k,ember-long", "--results-dir", str(tmp_path)])
    data = _check_json(tmp_path / "long_chain.json", "long_chain", "us/op", ["ember-1k", "ember-long"])
    assert data["ops_per_call"] == 1000
    assert data["ratios"]["ember-long / ember-1k"] > 0
    with pytest.raises(ValueError, match="multiple"):
        mod.workloads(length=1500, short=1000)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mlp_floor_rows_compute_the_numpy_step(dtype, monkeypatch):
    # numpy-inplace and minimal-tape are the floors ember-step is compared with: they must do
    # the reference's step (same losses over steps, parameters carried), not less work
    import numpy as np

    mod = _load_script("mlp", monkeypatch)
    monkeypatch.setattr(mod, "SIZES", (6, 5, 4, 3))
    monkeypatch.setattr(mod, "BATCH", 4)
    steps = {k: getattr(mod, f"setup_{k}")(np.dtype(dtype).type)
             for k in ("numpy", "numpy_inplace", "minimal_tape")}
    losses = {k: [float(f()) for _ in range(4)] for k, f in steps.items()}
    ref = losses.pop("numpy")
    assert ref[-1] < ref[0]  # it trains: parameters are carried from step to step
    for k, got in losses.items():
        np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == "float32" else 1e-12, err_msg=k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_layout_rows_compute_the_same_step(dtype, tmp_path, monkeypatch):
    # the layouts compared must do the same products: equal outputs and weight gradients,
    # and the fused update the in-place SGD's new weight (up to rounding); then a tiny run
    import numpy as np

    mod = _load_script("gemm_layout", monkeypatch)
    monkeypatch.setattr(mod, "BATCH", 3)
    monkeypatch.setattr(mod, "INPUT", (7, 5))
    monkeypatch.setattr(mod, "HIDDEN", (5, 5))
    dt = np.dtype(dtype).type
    tol = {"rtol": 1e-5 if dtype == "float32" else 1e-12}
    for shape, grad_x in ((mod.INPUT, False), (mod.HIDDEN, True)):
        c = mod.setup_layer(dt, shape, "C", grad_x)()
        f = mod.setup_layer(dt, shape, "F", grad_x)()
        assert len(c) == len(f) == (3 if grad_x else 2)
        assert f[1].flags.f_contiguous and f[1].shape == c[1].shape
        for a, b in zip(c, f):
            np.testing.assert_allclose(b, a, **tol)
    x, w, g = mod._problem(dt, mod.INPUT, "C")
    monkeypatch.setattr(mod, "LR", 0.5)  # large enough that the update shows
    new = mod.setup_layer(dt, mod.INPUT, "C", False, "sgd")()[1]
    np.testing.assert_allclose(new, w - 0.5 * (g.T @ x), **tol)
    try:
        fused = mod.setup_layer(dt, mod.INPUT, "C", False, "fused")
    except mod.Skip as e:  # a SciPy build whose gemm copies: the row says n/a, nothing to check
        pytest.skip(str(e))
    np.testing.assert_allclose(fused()[1], w - 0.5 * (g.T @ x), **tol)
    (wl,) = [wk for wk in mod.workloads() if wk.name == f"gemm_layout_{dtype}"]
    mod.run_cli([wl], [*_TINY, "--results-dir", str(tmp_path)])
    _check_json(tmp_path / f"{wl.name}.json", wl.name, "us/call", list(wl.impls))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reductions_rows_compute_the_same_sums(dtype, tmp_path, monkeypatch):
    # both rows of a shape compute the last-axis sum (to rounding); then a tiny run
    import numpy as np

    mod = _load_script("reductions", monkeypatch)
    monkeypatch.setattr(mod, "SHAPES", {"scores": (2, 3, 4, 5), "features": (2, 3, 6), "logits": (300, 10)})
    dt = np.dtype(dtype).type
    for shape in mod.SHAPES.values():
        want = mod.setup(dt, shape, "sum")()
        assert want.shape == (*shape[:-1], 1)
        np.testing.assert_allclose(mod.setup(dt, shape, "product")(), want,
                                   rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6)
        np.testing.assert_array_equal(mod.setup(dt, shape, "max-columns")(), mod.setup(dt, shape, "max")())
    (wl,) = [wk for wk in mod.workloads() if wk.name == f"reductions_{dtype}"]
    mod.run_cli([wl], [*_TINY, "--results-dir", str(tmp_path)])
    _check_json(tmp_path / f"{wl.name}.json", wl.name, "us/call", list(wl.impls))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_extremum_rows_compute_the_same_relu(dtype, tmp_path, monkeypatch):
    # both rows of a shape compute maximum(x, 0.0) bit for bit, both clips the same; then a tiny run
    import numpy as np

    mod = _load_script("extremum", monkeypatch)
    monkeypatch.setattr(mod, "SHAPES", {"small": (1024,), "mlp": (16, 256), "large": (300, 500)})
    dt = np.dtype(dtype).type
    for shape in mod.SHAPES.values():
        want = mod.setup(dt, shape, "ufunc")()
        assert want.shape == shape and want.dtype == dt
        np.testing.assert_array_equal(mod.setup(dt, shape, "kept")(), want)
        np.testing.assert_array_equal(mod.setup(dt, shape, "clip")(), mod.setup(dt, shape, "clip-compat")())
    (wl,) = [wk for wk in mod.workloads() if wk.name == f"extremum_{dtype}"]
    mod.run_cli([wl], [*_TINY, "--results-dir", str(tmp_path)])
    _check_json(tmp_path / f"{wl.name}.json", wl.name, "us/call", list(wl.impls))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fusion_rows_compute_the_same_values(dtype, tmp_path, monkeypatch):
    # NumPy's calls and the fused program of each kind compute the same (to rounding); then a
    # tiny run
    import numpy as np

    import ember.backend as eb

    if eb.fuser(eb.get("numpy")) is None:
        pytest.skip("numexpr is not installed (pip install ember[fuse]); tests/backend/test_fusion.py skips too")
    mod = _load_script("fusion", monkeypatch)
    monkeypatch.setattr(mod, "SIZES", (8, 70))
    dt = np.dtype(dtype).type
    for steps in (mod.TRANSCENDENTAL, mod.ARITHMETIC):
        for n in mod.SIZES:
            want = mod.setup(dt, steps, n, "calls")()
            got = mod.setup(dt, steps, n, "fused")()
            assert got.dtype == want.dtype and got.shape == (n,)
            np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12)
    (wl,) = [wk for wk in mod.workloads() if wk.name == f"fusion_{dtype}"]
    mod.run_cli([wl], [*_TINY, "--results-dir", str(tmp_path)])
    _check_json(tmp_path / f"{wl.name}.json", wl.name, "us/call", list(wl.impls))


def test_chain_minimal_tape_computes_embers_gradient(monkeypatch):
    # the chain's floor row must differentiate the whole chain (every op's VJP, the x + y fan-in)
    import numpy as np

    import ember
    import ember.autodiff.numpy as xp

    mod = _load_script("overhead", monkeypatch)
    x = np.random.default_rng(1).uniform(-1.0, 1.0, (5,))
    want = ember.grad(lambda t: xp.sum(mod.chain(t, xp)))(xp.asarray(x))
    got = mod.minimal_tape_grad(x)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12)
    eps = 1e-6  # and both are the derivative (central differences of the first component)
    e0 = np.eye(5)[0] * eps
    fd = (np.sum(mod.chain(x + e0, np)) - np.sum(mod.chain(x - e0, np))) / (2 * eps)
    assert abs(got[0] - fd) < 1e-6 * max(1.0, abs(fd))


def _fake(name, unit, medians, ratios, ops=1.0, reference=None, ratio_ci=None):
    res = {k: {"name": k, "status": "ok" if v else "error", "note": "" if v else "RecursionError: x",
               "n": 1, "samples": [v] if v else [], "median": v, "min": v, "max": v,
               "ratio": None} for k, v in medians.items()}
    return {"name": name, "unit": unit, "ops_per_call": ops, "reference": reference, "rounds": 1,
            "results": res, "ratios": ratios, "ratio_ci": ratio_ci or {}, "versions": {"numpy": "x"}}


def test_all_summary_and_chart(tmp_path, monkeypatch):
    all_mod = _load_script("all", monkeypatch)
    docs = [
        _fake("overhead", "us/op", {"numpy": 0.4, "ember-untracked": 0.5, "ember-grad": 2.5, "torch": 6.0,
                                    "minimal-tape": 1.6},
              {"ember-untracked / numpy": 1.25, "ember-grad / torch": 2.5 / 6.0,
               "ember-grad / minimal-tape": 2.5 / 1.6}, 100, "numpy"),
        _fake("mlp_float32", "ms/step", {"numpy": 2.0, "ember-step": 2.2}, {"ember-step / numpy": 1.1},
              ratio_ci={"ember-step / numpy": [1.03, 1.16]}),
        _fake("long_chain", "us/op", {"ember-1k": 3.0, "ember-long": None},
              {"ember-long / ember-1k": None}, 100_000, "ember-1k"),
    ]
    for d in docs:
        (tmp_path / f"{d['name']}.json").write_text(json.dumps(d))
    (tmp_path / "ownership.json").write_text(json.dumps({"chain": [1, 2]}))  # not harness format
    assert all_mod.main(["--summary-only", "--no-chart", "--results-dir", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "summary.json").read_text())
    acc = {a["id"]: a for a in doc["acceptance"]}
    assert set(acc) == {a[0] for a in all_mod.ACCEPTANCE}
    assert acc["elementwise_us_per_op"]["value"] == 2.5 and acc["elementwise_us_per_op"]["pass"] is True
    assert acc["elementwise_vs_torch"]["pass"] is True and acc["untracked_vs_numpy"]["pass"] is True
    assert acc["elementwise_vs_minimal_tape"]["pass"] is False  # 1.5625x > 1.36x
    assert acc["mlp_float32_vs_numpy"]["pass"] is False
    # the interval comes with the verdict: 1.10x fails, but its interval holds the 1.05x target
    assert acc["mlp_float32_vs_numpy"]["ci"] == [1.03, 1.16] and acc["mlp_float32_vs_numpy"]["within_noise"]
    assert acc["elementwise_vs_torch"]["ci"] is None and not acc["elementwise_vs_torch"]["within_noise"]
    assert acc["mlp_float64_vs_numpy"]["value"] is None and "not run" in acc["mlp_float64_vs_numpy"]["note"]
    lc = acc["long_chain_per_op"]
    assert lc["completed"] is False and "RecursionError" in lc["note"] and lc["length"] == 100_000
    assert doc["all_pass"] is False and set(doc["workloads"]) == {"overhead", "mlp_float32", "long_chain"}
    md = (tmp_path / "summary.md").read_text()
    assert "| elementwise chain fwd+bwd, ember / torch | 0.417x | n/a | <= 0.5x | pass |" in md
    assert "| 1.1x | 1.03-1.16 | <= 1.05x | FAIL (the CI holds the target) |" in md

    chart = _load_script("chart", monkeypatch)
    png = chart.make_chart(tmp_path, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_all_passes_only_known_flags(monkeypatch, tmp_path):
    all_mod = _load_script("all", monkeypatch)
    args = all_mod.parse_args(["--quick", "--rounds", "2", "--only", "ember", "--target", "0.5"])
    cmd = all_mod.script_command("ownership", args, tmp_path)  # knows --rounds, not --only/--target
    assert "--quick" in cmd and cmd[cmd.index("--rounds") + 1] == "2"
    assert "--only" not in cmd and "--target" not in cmd
    cmd = all_mod.script_command("cnn", args, tmp_path)
    assert cmd[cmd.index("--only") + 1] == "ember" and "--target" in cmd
    assert all_mod.main(["--scripts", "nosuch"]) == 2


def test_icount_inner_runs_an_impl_and_names_what_is_missing():
    """icount's inner run (what valgrind executes) finds the workload; bad names are clear."""
    import subprocess

    script = str(BENCH_DIR / "icount.py")
    ok = subprocess.run([sys.executable, script, "--inner", "overhead", "numpy", "--calls", "2"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, script, "--inner", "overhead", "nope"], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "has no implementation 'nope'" in bad.stderr
    unknown = subprocess.run([sys.executable, script, "--inner", "no_such", "numpy"],
                             capture_output=True, text=True)
    assert unknown.returncode != 0 and "unknown workload 'no_such'" in unknown.stderr


def test_isolated_times_each_impl_in_its_own_processes(monkeypatch):
    """isolated.py: one worker process per impl and --procs, paired per-round ratios (the
    reference's own is 1), one median per process; a bad name stops the run clearly."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location("isolated_smoke", BENCH_DIR / "isolated.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.measure("overhead", ["numpy", "ember-untracked"], procs=2, rounds=3, calls=2)
    assert list(res) == ["numpy", "ember-untracked"]
    assert res["numpy"]["ratio"] == 1.0 and res["ember-untracked"]["ratio"] > 0
    assert all(len(r["per_process"]) == 2 and min(r["per_process"]) > 0 for r in res.values())
    with pytest.raises(SystemExit, match="failed to start"):
        mod.measure("overhead", ["numpy", "nope"], procs=1, rounds=1, calls=1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self (Linux only)")
def test_checkpointing_rss_child_measures_itself_after_a_big_parent():
    # Linux starts a child's ru_maxrss at the parent's RSS: the torch peers' memory read as
    # "did not grow" after the ember runs had held gigabytes. The child resets its peak.
    import subprocess

    import numpy as np

    held = np.ones(64 * 2**20)  # 512 MiB resident here, far above the child's peak
    cmd = [sys.executable, str(BENCH_DIR / "checkpointing.py"), "--_rss", "numpy-none",
           "--size", "1000000", "--layers", "8"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    peak = int(out.stdout.strip().splitlines()[-1])
    del held
    assert 16 * 2**20 < peak < 512 * 2**20, peak  # 8 layers of 4 MB saved, and more


def test_mlp_phases_times_every_phase_and_puts_embers_backward_back(monkeypatch, capsys):
    """mlp_phases.py on a tiny MLP: a row per phase for both steps, ember's backward functions
    restored afterwards (the script wraps them to mark the backward pass's end)."""
    import ember.func._transforms as transforms

    before = (transforms.backward_quiet, transforms._backward_raw)
    mod = _load_script("mlp_phases", monkeypatch)
    monkeypatch.setattr(mod.mlp, "SIZES", (6, 5, 4, 3))
    monkeypatch.setattr(mod.mlp, "BATCH", 4)
    assert mod.main(["--rounds", "1", "--steps", "2"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert list(rows) == [*mod.PHASES, "total"]
    for phase, (ember_ms, numpy_ms, _) in rows.items():
        assert float(ember_ms) >= 0 and float(numpy_ms) >= 0, phase
    assert float(rows["backward"][0]) > 0 and float(rows["setup"][1]) < float(rows["total"][1])
    assert (transforms.backward_quiet, transforms._backward_raw) == before
    # its marked copy of numpy-inplace's step trains exactly as mlp.py's does
    import numpy as np

    marked, plain = mod.numpy_step(np.float64, lambda: None), mod.mlp.setup_numpy_inplace(np.float64)
    assert [float(marked()) for _ in range(3)] == [float(plain()) for _ in range(3)]
