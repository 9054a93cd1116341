"""Smoke test for benchmarks/_harness.py: runs, tabulates, writes JSON. No timing asserts."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


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
    assert res.impls["other"].ratio == pytest.approx(res.impls["other"].median / ok.median)
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
