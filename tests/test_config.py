"""ember.config: validation, scoping, and the GC threshold used while tapes are live."""

import functools
import gc
import json
import os
import subprocess
import sys

import pytest

import ember
import ember.autodiff.numpy as xp
from ember._config import BAD_CONFIG, UNKNOWN_CONFIG


def _seen_threshold():
    """grad of a function that records gc's gen-0 threshold while it is traced."""
    seen = []

    def f(x):
        seen.append(gc.get_threshold()[0])
        return xp.sum(xp.sin(x))

    ember.grad(f)(xp.ones(3))
    return seen[0]


def test_gc_is_left_alone_by_default():
    """Tuning the collector changes the whole process: opt-in (ember.config)."""
    assert ember._config.CONFIG["gc_threshold"] is None
    before = gc.get_threshold()
    assert _seen_threshold() == before[0]
    assert gc.get_threshold() == before


def test_gc_threshold_raised_while_tracing_and_restored():
    before = gc.get_threshold()
    with ember.config(gc_threshold=ember._config.RECOMMENDED["gc_threshold"]):
        assert _seen_threshold() == max(50_000, before[0])
    assert gc.get_threshold() == before


def test_older_generations_wait_while_tracing():
    # each pass over generations 1 and 2 walks the whole tape: deferred until the trace closes
    before = gc.get_threshold()
    seen = []

    def f(x):
        seen.append(gc.get_threshold())
        return xp.sum(xp.sin(x))

    with ember.config(gc_threshold=50_000):
        ember.grad(f)(xp.ones(3))
    assert seen[0][1] >= 1 << 20 and seen[0][2] >= 1 << 20
    assert gc.get_threshold() == before


def test_gc_threshold_none_leaves_the_collector_alone():
    before = gc.get_threshold()
    with ember.config(gc_threshold=None):
        assert _seen_threshold() == before[0]
    assert gc.get_threshold() == before


def test_gc_threshold_keeps_a_larger_user_setting_and_a_disabled_collector():
    before = gc.get_threshold()
    try:
        gc.set_threshold(10**7, *before[1:])
        assert _seen_threshold() == 10**7
        gc.set_threshold(0, *before[1:])  # automatic collection off: stays off
        assert _seen_threshold() == 0
    finally:
        gc.set_threshold(*before)


def test_backward_of_a_vjp_function_runs_under_the_threshold(monkeypatch):
    from ember.autodiff._rules import RULES

    seen = []
    rule = RULES["sin"]
    (f0,) = rule.fns

    def spy(*a):
        seen.append(gc.get_threshold()[0])
        return f0(*a)

    monkeypatch.setattr(rule, "fns", (spy,))
    y, pull = ember.vjp(lambda x: xp.sin(x), xp.ones(2))  # the trace is closed here
    before = gc.get_threshold()
    with ember.config(gc_threshold=123_457):
        pull(xp.ones(2))
    assert seen == [max(123_457, before[0])] and gc.get_threshold() == before


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "high"])
def test_gc_threshold_validation(bad):
    with pytest.raises(ValueError, match="gc_threshold must be a positive int or None"):
        ember.config(gc_threshold=bad)


def test_unknown_option_and_scoping():
    with pytest.raises(TypeError, match="unknown option 'nope'"):
        ember.config(nope=1)
    with ember.config(on_hidden_copy="warn") as cfg:
        assert cfg["on_hidden_copy"] == "warn" and ember._config.get_config()["on_hidden_copy"] == "warn"
    assert ember._config.get_config()["on_hidden_copy"] == "ignore"
    assert "{key}" in BAD_CONFIG and "{known}" in UNKNOWN_CONFIG


# --- malloc_trim_threshold: glibc keeps freed pages for the next step ----------------------

_GLIBC = ember._heap._glibc_mallopt() is not None
#: glibc's own malloc settings in the environment, which the probes run without
_GLIBC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


# Measured in a fresh process: in one that has run other tests, a 1 MiB array may come from a
# hole that earlier objects left in the heap (touched pages, nothing to trim), whatever the policy.
_HEAP_PROBE = r"""
import ctypes, json, mmap, resource
import numpy as np
import ember

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def fault_counted():  # whether getrusage counts minor faults at all here
    before = faults()
    with mmap.mmap(-1, 1 << 20) as m:
        for i in range(0, len(m), mmap.PAGESIZE):
            m[i] = 1
    return faults() > before

def faults_of_fresh_arrays(n=8, nbytes=1 << 20):  # making, writing and dropping n arrays
    np.ones(nbytes // 8)  # the first one may take new pages either way
    before = faults()
    for _ in range(n):
        a = np.ones(nbytes // 8)
        del a
    return faults() - before

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
info = getattr(libc, "mallinfo2", None)
if info is not None:
    info.restype = Mallinfo2

def returned_on_free(nbytes=1 << 20):  # bytes glibc gives back (heap trimmed, mapping undone)
    if info is None:  # mallinfo2: glibc 2.33
        return None
    def held():  # the heap's bytes and the mapped ones
        m = info()
        return m.arena + m.hblkhd
    a = np.ones(nbytes // 8)
    during = held()
    del a
    return during - held()

out = {"default": ember._config.CONFIG["malloc_trim_threshold"], "fault_counted": fault_counted()}
for name, value in (("kept", 256 << 20), ("fresh", None)):  # fresh: glibc's static defaults
    with ember.config(malloc_trim_threshold=value):
        out[name] = {"faults": min(faults_of_fresh_arrays() for _ in range(3)),
                     "returned": [returned_on_free() for _ in range(3)]}
print(json.dumps(out))
"""


@functools.cache
def _heap_probe() -> dict:
    """The probe's findings, from a child with the default environment for malloc."""
    env = {k: v for k, v in os.environ.items()
           if k not in (ember._heap.ENV, *_GLIBC_ENV, "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", _HEAP_PROBE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


_GLIBC_REASON = ("malloc_trim_threshold tunes glibc's malloc; on other C libraries it changes "
                 "nothing (test_malloc_trim_threshold_values checks that)")


@pytest.mark.skipif(not _GLIBC, reason=_GLIBC_REASON)
def test_malloc_trim_threshold_keeps_freed_memory():
    assert ember._config.CONFIG["malloc_trim_threshold"] == ember._heap.initial_trim_threshold()
    probe = _heap_probe()
    assert probe["default"] is None  # opt-in: malloc left as it is at import
    kept, fresh = probe["kept"]["returned"], probe["fresh"]["returned"]
    if kept[0] is None:
        pytest.skip("mallinfo2 needs glibc 2.33 (test_malloc_trim_threshold_saves_page_faults "
                    "checks the same policy by page faults)")
    assert kept == [0, 0, 0] and min(fresh) >= 1 << 20, (kept, fresh)


@pytest.mark.skipif(not _GLIBC, reason=_GLIBC_REASON)
def test_malloc_trim_threshold_saves_page_faults():
    probe = _heap_probe()
    if not probe["fault_counted"]:
        pytest.skip("getrusage counts no page faults here (test_malloc_trim_threshold_keeps_"
                    "freed_memory checks the same policy by glibc's own accounting)")
    kept, fresh = probe["kept"]["faults"], probe["fresh"]["faults"]
    assert kept < 64 and fresh >= 8 * 128, (kept, fresh)


def test_malloc_trim_threshold_values(monkeypatch):
    from ember._heap import RECOMMENDED_TRIM_THRESHOLD, ENV, apply_trim_threshold, initial_trim_threshold

    before = ember._config.CONFIG["malloc_trim_threshold"]
    for var in (*_GLIBC_ENV, "GLIBC_TUNABLES"):  # this test's own environment
        monkeypatch.delenv(var, raising=False)
    assert apply_trim_threshold(RECOMMENDED_TRIM_THRESHOLD) is _GLIBC  # False: nothing to tune
    for env, want in (("", None), ("none", None), (" None ", None), ("1048576", 1 << 20)):
        monkeypatch.setenv(ENV, env)
        assert initial_trim_threshold() == want
    monkeypatch.delenv(ENV)
    for var, value in (("MALLOC_TRIM_THRESHOLD_", "1000000"), ("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")):
        monkeypatch.setenv(var, value)  # malloc tuned through the environment: left as it is
        assert initial_trim_threshold() is None
        monkeypatch.setenv(ENV, "4096")  # unless asked
        assert initial_trim_threshold() == 4096
        monkeypatch.delenv(ENV)
        monkeypatch.delenv(var)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0")  # other tunables: as asked
    monkeypatch.setenv(ENV, "4096")
    assert initial_trim_threshold() == 4096
    monkeypatch.delenv(ENV)
    for env in ("abc", "-1", "1.5"):
        monkeypatch.setenv(ENV, env)
        with pytest.raises(ValueError, match=r"\$EMBER_MALLOC_TRIM_THRESHOLD=.* or to 'none'"):
            initial_trim_threshold()
    for bad in (-1, 1.5, True, "256M"):
        with pytest.raises(ValueError, match=r"malloc_trim_threshold must be a number of bytes"):
            ember.config(malloc_trim_threshold=bad)
    with ember.config(malloc_trim_threshold=0) as cfg:  # 0: return every freed page at once
        assert cfg["malloc_trim_threshold"] == 0
    assert ember._config.CONFIG["malloc_trim_threshold"] == before


@pytest.mark.parametrize("env", ["none", "", "1048576"])
def test_import_leaves_malloc_alone_unless_asked(env):
    """Importing ember never loads the C library's mallopt (ctypes.CDLL(None)) unless
    $EMBER_MALLOC_TRIM_THRESHOLD asks for a value (then on glibc it does)."""
    import os
    import subprocess
    import sys

    code = ("import ctypes; seen = []; real = ctypes.CDLL\n"
            "ctypes.CDLL = lambda *a, **k: seen.append(a[0] if a else 0) or real(*a, **k)\n"
            "import ember; print(ember._config.CONFIG['malloc_trim_threshold'], None in seen)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")
                                 and k != "GLIBC_TUNABLES"}, "EMBER_MALLOC_TRIM_THRESHOLD": env})
    want = ["1048576", str(_GLIBC)] if env == "1048576" else ["None", "False"]
    assert out.stdout.split() == want
