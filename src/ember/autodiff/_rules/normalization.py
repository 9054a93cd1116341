"""``_layer_norm``: ``nn.LayerNorm`` as one memory-bound node.

The forward is the composition ``(x - mean) / sqrt(var + eps) * w + b`` over
the normalized (last) axes, the same operations in the same order (a mean
over the last axis alone of a backend array is a product with ones:
``kernels.mean_last``), so the same values up to that sum's rounding. With
the normalized input ``y = (x - mean) / s``,
``s = sqrt(var + eps)`` (kept by a one-level forward, else recomputed),
``gy = g * w`` and means over the normalized axes, the VJP is::

    gx = (gy - mean(gy) - y * mean(gy * y)) / s
    gw = sum of g * y over the other axes,   gb = sum of g over them

fewer passes than the composed ops' VJPs (nine nodes). Written with the
namespace it is given, so higher orders differentiate it.
"""

from __future__ import annotations

from ...kernels import layer_norm
from ._util import fit, reduce_last


def layer_norm_vjp(ns, g, ans, args, params, parents):
    x, w, b = args
    axes = params["axes"]
    parts = params.get("parts")  # kept by a one-level forward (_wrappers), else recomputed
    y, s = parts if parts is not None else layer_norm(ns, x, None, None, axes, params["eps"])[1]
    gx = gw = gb = None
    if parents[1] is not None:
        gw = fit(ns, g * y, w)
    if parents[2] is not None:
        gb = fit(ns, g, b)
    if parents[0] is not None:
        gy = g if w is None else g * w
        gx = fit(ns, (gy - reduce_last(ns, gy, axes, True, mean=True)
                      - y * reduce_last(ns, gy * y, axes, True, mean=True)) / s, x)
    return gx, gw, gb

