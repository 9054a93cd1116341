#!/usr/bin/env bash
# ember on an NVIDIA GPU, in one prepared run (finishes in under 8 minutes):
#
#   1. reads the driver's CUDA version (nvidia-smi) and makes sure CuPy works,
#      installing cupy-cuda12x or cupy-cuda13x to match it when it does not
#      (from wheels carried in .whl/ when present, else with pip);
#   2. runs the test-suite on the cupy backend
#      (EMBER_TEST_BACKENDS=cupy pytest tests conformance/spec -k cupy);
#   3. runs the official array-API conformance suite on ember.autodiff.cupy
#      when ARRAY_API_TESTS_DIR points at a checkout (conformance/run);
#   4. times one MLP training step: ember on CuPy vs PyTorch CUDA eager
#      (and ember over torch CUDA), float32, two model sizes;
#   5. writes everything to $OUT/gpu-results.txt (or ./gpu-results.txt), with
#      the pytest log/junit, conformance log/xml and bench JSON next to it.
#
# Usage (from anywhere):
#   tests/gpu/run.sh                   # on the GPU machine
#   tests/gpu/run.sh --prepare-wheels  # on a machine with pip + network: put the
#                                      # pure-Python packages the GPU image lacks
#                                      # into .whl/ (carry it to the GPU machine)
# Environment:
#   PYTHON                   interpreter (default python3)
#   EMBER_GPU_BUDGET_S       total seconds for all steps (default 450)
#   EMBER_GPU_CONF_EXAMPLES  Hypothesis examples per conformance test (default 10)
#   ARRAY_API_TESTS_DIR      checkout of data-apis/array-api-tests (optional)
# Exit status: 0 when the cupy tests (and conformance, if run) passed, else 1.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}

# ----------------------------------------------------------------------------
# --prepare-wheels: runs where pip can reach the package index.
# ----------------------------------------------------------------------------
# Pure-Python needs of ember's tests, the conformance suite and dask that the
# GPU image does not have (it has numpy, cupy-cuda13x, torch, jax, pytest,
# hypothesis, safetensors, click, rich, cloudpickle, packaging).
WHEELS="array-api-compat==1.16.0 array-api-extra==0.11.5 array-api-strict==2.6.1
dask==2026.8.0 toolz partd locket fsspec pyyaml ndindex pytest-json-report pytest-metadata"
if [ "${1:-}" = "--prepare-wheels" ]; then
    mkdir -p .whl
    excl=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
    if [ -n "$excl" ] && ! grep -qx '/.whl/' "$excl" 2>/dev/null; then
        mkdir -p "$(dirname "$excl")" && echo '/.whl/' >>"$excl"
    fi
    for w in $WHEELS; do
        $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 -d .whl "$w" || echo "could not download $w" >&2
    done
    # CuPy wheels are ~100 MB, over the 64 MiB a device call carries; the GPU
    # image already has cupy-cuda13x. Add one here only for another machine:
    #   $PY -m pip download --no-deps --only-binary=:all: ... -d .whl cupy-cuda12x
    ls -l .whl
    exit 0
fi

START=$(date +%s)
BUDGET=${EMBER_GPU_BUDGET_S:-450}
RES_DIR=${OUT:-$ROOT}
mkdir -p "$RES_DIR"
RESULTS=$RES_DIR/gpu-results.txt
: >"$RESULTS"
STATUS=0

log() { echo "$*" | tee -a "$RESULTS"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# seconds for the next step: what it wants, at most what is left minus a margin
allot() { local want=$1 l; l=$(($(left) - 15)); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 5 ] && want=5; echo "$want"; }

log "# ember GPU run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
log "repo: $ROOT"

# ----------------------------------------------------------------------------
# 0. carried wheels
# ----------------------------------------------------------------------------
SITE=/tmp/ember-site
if ls .whl/*.whl >/dev/null 2>&1; then
    plain=$(ls .whl/*.whl | grep -v '/cupy_cuda' || true)
    if [ -n "$plain" ]; then
        # shellcheck disable=SC2086
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" $plain >/dev/null 2>&1 && log "installed carried wheels: $(echo $plain | wc -w)" \
            || log "WARNING: installing carried wheels failed"
    fi
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if ! missing=$($PY -c 'import array_api_compat, array_api_extra, safetensors, ember' 2>&1); then
    log "ERROR: ember does not import here ($(echo "$missing" | tail -1)); carry its wheels:"
    log "  run 'tests/gpu/run.sh --prepare-wheels' where pip works, then carry .whl to this machine"
    exit 2
fi

# ----------------------------------------------------------------------------
# 1. driver, CUDA version, CuPy
# ----------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
    log "ERROR: nvidia-smi not found: this script needs an NVIDIA GPU machine"
    exit 2
fi
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
CUDA_VER=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1)
CUDA_MAJOR=${CUDA_VER%%.*}
log "gpu: $GPU; driver CUDA version: ${CUDA_VER:-unknown}"
case "${CUDA_MAJOR:-0}" in
    11) CUPY_PKG=cupy-cuda11x ;;
    12) CUPY_PKG=cupy-cuda12x ;;
    *) if [ "${CUDA_MAJOR:-0}" -ge 13 ] 2>/dev/null; then CUPY_PKG=cupy-cuda13x; else CUPY_PKG=cupy-cuda12x; fi ;;
esac

cupy_ok() {
    timeout 120 $PY - <<'EOF' 2>&1
import cupy
n = cupy.cuda.runtime.getDeviceCount()
v = int((cupy.arange(4) ** 2).sum())  # a real kernel: catches driver/runtime mismatches
assert n > 0 and v == 14, (n, v)
rt = cupy.cuda.runtime.runtimeGetVersion()
print(f"cupy {cupy.__version__} (CUDA runtime {rt // 1000}.{rt % 1000 // 10}), {n} device(s)")
EOF
}
if out=$(cupy_ok); then
    log "cupy: $out (already installed)"
else
    log "cupy not usable yet ($(echo "$out" | tail -1)); installing $CUPY_PKG"
    whl=$(ls .whl/"${CUPY_PKG//-/_}"-*.whl 2>/dev/null | head -1)
    if [ -n "$whl" ]; then
        $PY -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target "$SITE" "$whl" \
            >/dev/null 2>&1 || log "WARNING: installing $whl failed"
        case ":$PYTHONPATH:" in *":$SITE:"*) ;; *) export PYTHONPATH="$PYTHONPATH:$SITE" ;; esac
    else
        timeout "$(allot 180)" $PY -m pip install -q "$CUPY_PKG" >/dev/null 2>&1 \
            || log "WARNING: pip install $CUPY_PKG failed (no network? carry the wheel in .whl/)"
    fi
    if out=$(cupy_ok); then
        log "cupy: $out (installed $CUPY_PKG)"
    else
        log "ERROR: cupy still not usable: $(echo "$out" | tail -1)"
        STATUS=1
    fi
fi
log "python: $($PY -c 'import sys; print(sys.version.split()[0])') at $(command -v $PY)"
log "versions: $($PY -c '
import importlib
out = []
for m in ("numpy", "cupy", "torch", "array_api_compat", "array_api_strict", "dask", "jax", "hypothesis"):
    try:
        out.append(f"{m} {importlib.import_module(m).__version__}")
    except Exception as e:
        out.append(f"{m} missing")
print(", ".join(out))' 2>&1 | tail -1)"
log "ember backends: $($PY -c 'import ember.backend as b; print(b.available())' 2>&1 | tail -1)"

# ----------------------------------------------------------------------------
# 2. test-suite on the cupy backend
# ----------------------------------------------------------------------------
log ""
log "## tests on cupy (EMBER_TEST_BACKENDS=cupy, -k cupy)"
XDIST=""
$PY -c "import xdist" >/dev/null 2>&1 && XDIST="-n 4"
t=$(allot 200)
# shellcheck disable=SC2086
EMBER_TEST_BACKENDS=cupy timeout "$t" $PY -m pytest tests conformance/spec -k cupy -q -rfEs $XDIST \
    --continue-on-collection-errors --junitxml="$RES_DIR/cupy-tests.xml" >"$RES_DIR/cupy-tests.log" 2>&1
rc=$?
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)' "$RES_DIR/cupy-tests.log" | tail -1)
[ $rc -eq 124 ] && summary="TIMED OUT after ${t}s; $summary"
log "pytest exit $rc: ${summary:-no summary line (see cupy-tests.log)}"
grep -E '^(FAILED|ERROR) ' "$RES_DIR/cupy-tests.log" | head -40 | tee -a "$RESULTS" >/dev/null
grep -E '^SKIPPED ' "$RES_DIR/cupy-tests.log" | head -15 | tee -a "$RESULTS" >/dev/null
# 5 = nothing collected (can only mean -k cupy matched nothing); 0 = all passed
if [ $rc -ne 0 ]; then STATUS=1; fi

# ----------------------------------------------------------------------------
# 3. official conformance suite on ember.autodiff.cupy
# ----------------------------------------------------------------------------
log ""
log "## array-API conformance: ember.autodiff.cupy"
if [ -n "${ARRAY_API_TESTS_DIR:-}" ] && [ -d "${ARRAY_API_TESTS_DIR}" ]; then
    t=$(allot 150)
    line=$(timeout "$t" $PY conformance/run ember.autodiff.cupy --version 2024.12 \
        --max-examples "${EMBER_GPU_CONF_EXAMPLES:-10}" --out "$RES_DIR" 2>"$RES_DIR/conformance-stderr.txt")
    rc=$?
    [ $rc -eq 124 ] && line="TIMED OUT after ${t}s ($line)"
    log "conformance exit $rc: ${line:-no summary line (see conformance-stderr.txt)}"
    [ $rc -ne 0 ] && STATUS=1
else
    log "skipped: ARRAY_API_TESTS_DIR is not set to an array-api-tests checkout (see conformance/README.md)"
fi

# ----------------------------------------------------------------------------
# 4. MLP training step: ember on CuPy vs PyTorch CUDA
# ----------------------------------------------------------------------------
log ""
log "## MLP training step (float32, forward + cross-entropy + backward + SGD update), ms/step"
t=$(allot 120)
EMBER_BENCH_JSON="$RES_DIR/gpu-bench.json" timeout "$t" $PY - >>"$RESULTS" 2>"$RES_DIR/bench-stderr.txt" <<'EOF'
import json, os, statistics, time
import numpy as np

CASES = [((784, 256, 256, 10), 128), ((1024, 4096, 4096, 10), 1024)]
LR = 0.01
ROUNDS, STEPS = 5, 20


def problem(sizes, batch):
    rng = np.random.default_rng(0)
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        params[f"W{i}"] = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
        params[f"b{i}"] = np.zeros(b, np.float32)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    return params, x, y


def loss_fn(p, x, y, ns, batch):
    h = ns.maximum(x @ p["W1"] + p["b1"], 0.0)
    h = ns.maximum(h @ p["W2"] + p["b2"], 0.0)
    z = h @ p["W3"] + p["b3"]
    zs = z - ns.max(z, axis=1, keepdims=True)
    logp = zs - ns.log(ns.sum(ns.exp(zs), axis=1, keepdims=True))
    return -ns.sum(y * logp) / batch


def timed(step, sync):
    for _ in range(3):
        step()
    sync()
    per = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(STEPS):
            step()
        sync()
        per.append((time.perf_counter() - t0) / STEPS * 1e3)
    return statistics.median(per), min(per), max(per)


def ember_impl(nsname, device, sizes, batch):
    import ember
    xp = ember.autodiff.namespace(nsname)
    p0, x0, y0 = problem(sizes, batch)
    kw = {} if device is None else {"device": device}
    state = {"p": {k: xp.asarray(v, **kw) for k, v in p0.items()}}
    x, y = xp.asarray(x0, **kw), xp.asarray(y0, **kw)
    vg = ember.value_and_grad(lambda p: loss_fn(p, x, y, xp, batch))

    def step():
        loss, g = vg(state["p"])
        state["p"] = ember.tree.map(lambda a, b: a - LR * b, state["p"], g)
        state["loss"] = loss
    return step, lambda: float(state["loss"])


def torch_impl(sizes, batch):
    import torch
    p0, x0, y0 = problem(sizes, batch)
    p = {k: torch.tensor(v, device="cuda", requires_grad=True) for k, v in p0.items()}
    x, y = torch.tensor(x0, device="cuda"), torch.tensor(y0, device="cuda")
    state = {}

    class NS:  # the ops loss_fn uses, spelled for torch
        maximum = staticmethod(lambda a, b: torch.clamp_min(a, b))
        max = staticmethod(lambda a, axis, keepdims: torch.amax(a, dim=axis, keepdim=keepdims))
        sum = staticmethod(lambda a, axis=None, keepdims=False: a.sum() if axis is None else a.sum(dim=axis, keepdim=keepdims))
        log, exp = torch.log, torch.exp

    def step():
        loss = loss_fn(p, x, y, NS, batch)
        for v in p.values():
            v.grad = None
        loss.backward()
        with torch.no_grad():
            for v in p.values():
                v -= LR * v.grad
        state["loss"] = loss
    return step, lambda: float(state["loss"].detach())


def cupy_sync():
    import cupy
    cupy.cuda.Device().synchronize()


def torch_sync():
    import torch
    torch.cuda.synchronize()


results = []
for sizes, batch in CASES:
    name = "-".join(map(str, sizes)) + f" b{batch}"
    row = {"model": name}
    impls = {
        "ember-cupy": lambda: (ember_impl("cupy", None, sizes, batch), cupy_sync),
        "torch-cuda": lambda: (torch_impl(sizes, batch), torch_sync),
        "ember-torch-cuda": lambda: (ember_impl("torch", "cuda", sizes, batch), torch_sync),
    }
    losses = {}
    for impl, make in impls.items():
        try:
            (step, loss), sync = make()
            med, lo, hi = timed(step, sync)
            row[impl] = {"median_ms": med, "min_ms": lo, "max_ms": hi}
            losses[impl] = loss()
        except Exception as e:  # report, keep going
            row[impl] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    results.append(row)
    cells = []
    for impl in impls:
        r = row[impl]
        cells.append(f"{impl} {r['median_ms']:.3f} (min {r['min_ms']:.3f})" if "median_ms" in r else f"{impl} n/a ({r['error']})")
    ratio = ""
    if "median_ms" in row["ember-cupy"] and "median_ms" in row["torch-cuda"]:
        ratio = f"; ember-cupy / torch-cuda = {row['ember-cupy']['median_ms'] / row['torch-cuda']['median_ms']:.2f}x"
    print(f"{name}: " + ", ".join(cells) + ratio)
    if losses:
        spread = max(losses.values()) - min(losses.values())
        print(f"  losses after {3 + ROUNDS * STEPS} steps: " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items())
              + f" (spread {spread:.2e})")
with open(os.environ["EMBER_BENCH_JSON"], "w") as f:
    json.dump(results, f, indent=1)
EOF
rc=$?
[ $rc -ne 0 ] && log "benchmark exit $rc$([ $rc -eq 124 ] && echo ' (timed out)'): $(tail -3 "$RES_DIR/bench-stderr.txt" | tr '\n' ' ')"

log ""
log "total: $(($(date +%s) - START)) s; status $STATUS"
exit $STATUS
