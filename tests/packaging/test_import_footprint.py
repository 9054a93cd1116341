"""``import ember`` loads the core only (issue 39: it imported SciPy eagerly, 76 of 275 ms).

SciPy (an erf fast path), scikit-learn, matplotlib, click, rich, PyTorch and
Dask belong to extras or to the functions that need them; importing ember
(and its layers that need no extra) must not load any of them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
OPTIONAL = ("scipy", "sklearn", "matplotlib", "click", "rich", "torch", "dask", "jax", "cupy",
            "array_api_strict")


def test_import_ember_loads_no_optional_library():
    code = ("import sys, ember, ember.nn, ember.optim, ember.io, ember.training, ember.func\n"
            f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC)})
    assert out.stdout.strip() == "[]", out.stdout
