"""What the ``ember`` command prints: the help of a bare ``ember``, unwrapped piped output, the
smoke-run note of ``--quick``, usage errors' exit status, and the bench chart and help.

Every test runs the real console script (``python -m ember``) in a subprocess.
"""

from __future__ import annotations

import json
import re

import pytest
from _cli_run import ember, one_line_error


def test_bare_ember_prints_the_help_as_help_does():
    bare, helped = ember(), ember("--help")
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == helped.stdout and bare.stderr == ""
    assert bare.stdout.startswith("Usage: ember [OPTIONS] COMMAND")
    assert len(bare.stdout.splitlines()) > 10  # the help's own lines, not one squashed error line
    for command in ("train", "bench", "conformance", "info"):
        assert re.search(rf"^\s+{command}\s", bare.stdout, re.M), command


@pytest.fixture(scope="module")
def piped_quick_run(tmp_path_factory):
    """A --quick run into a directory whose path is longer than 80 columns, stdout a pipe, no COLUMNS."""
    out = tmp_path_factory.mktemp("piped") / ("a-long-directory-name-" * 4) / "run"
    assert len(str(out / "checkpoint.safetensors")) > 100
    return out, ember("train", "--quick", "--out", str(out), env={"COLUMNS": None})


def test_piped_output_keeps_paths_on_one_line(piped_quick_run):
    out, p = piped_quick_run
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert f"checkpoint: {out / 'checkpoint.safetensors'}" in lines
    assert f"curves:     {out / 'curves.png'}" in lines
    assert any(ln.startswith("ember train: cnn on digits") and ln.endswith("(x0.8 per epoch)") for ln in lines)


def test_quick_says_it_is_a_smoke_run(piped_quick_run):
    _, p = piped_quick_run
    assert p.returncode == 0, p.stderr
    note = next(ln for ln in p.stdout.splitlines() if ln.startswith("note: "))
    assert "--quick smoke run" in note and "drop --quick" in note
    result = next(ln for ln in p.stdout.splitlines() if ln.startswith("test accuracy "))
    assert re.fullmatch(r"test accuracy \d\.\d{4} after \d+\.\ds of training \(a --quick smoke run: "
                        r"this accuracy says nothing about the model; drop --quick for a real run\)", result), result


def test_a_full_run_has_no_smoke_run_note(tmp_path):
    # the note belongs to --quick only: a real run (here 1 epoch of the MLP) prints none
    p = ember("train", "--model", "mlp", "--epochs", "1", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "smoke run" not in p.stdout and "note:" not in p.stdout


@pytest.mark.parametrize("args, shown", [
    (("--backend", "tensorflow"), ("'tensorflow'", "numpy, dask, cupy, array_api_strict")),
    (("--model", "resnet"), ("'resnet'", "mlp, cnn")),
])
def test_unknown_backend_or_model_is_a_usage_error(args, shown, tmp_path):
    line = one_line_error(ember("train", *args, "--out", str(tmp_path / "o")), rc=2)
    assert all(s in line for s in shown) and "ember train --help" in line
    assert not (tmp_path / "o").exists()


def test_bench_help_says_what_it_does():
    p = ember("bench", "--help")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert "issue" not in text.lower() and "acceptance" not in text.lower()
    assert "ratio" in text and "OUT/summary.md" in text and "bench.png" in text


def test_bench_chart_has_plain_ratio_ticks_and_values_on_its_bars(tmp_path):
    p = ember("bench", "--quick", "--script", "overhead", "--only", "numpy,ember-untracked",
              "--out", str(tmp_path), env={"COLUMNS": None})
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]  # no temp file left
    header = next(ln for ln in p.stdout.splitlines() if "┃ workload" in ln)
    assert "implementation" in header and "ratio" in header  # the table is not folded at 80 columns

    # The PNG cannot be read back as text: draw the same chart from the JSON the command wrote
    # and read its labels.
    from ember.cli._bench import chart

    results = [json.loads((tmp_path / "results" / "overhead.json").read_text())]
    for spread in (None, 40.0):  # the measured ratios, then a range wide enough for a log axis
        if spread is not None:
            results[0]["results"]["ember-untracked"]["ratio"] = spread
        fig = chart(results)
        ax = fig.axes[0]
        fig.canvas.draw()
        ratios = [r["ratio"] for r in results[0]["results"].values()]
        bar_labels = [t.get_text() for t in ax.texts]
        assert len(bar_labels) == len(ratios)
        for label, ratio in zip(bar_labels, ratios):
            assert float(label.rstrip("x")) == pytest.approx(ratio, rel=0.05), (label, ratio)
        ticks = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()]
        assert ticks and all(re.fullmatch(r"\d+(\.\d+)?x", t) for t in ticks), ticks
        assert ax.get_xscale() == ("log" if spread else "linear")
