"""``_max_pool_tiles``: max pooling over non-overlapping windows that tile the input.

``nn.max_pool``'s common case (stride equal to the kernel, no padding or dilation,
windows that tile the spatial axes) as one memory-bound node. The forward is the
elementwise maximum of the window offsets' strided views; the VJP gives each
window's cotangent to its first maximal element in row-major window order
(PyTorch's choice at ties) and interleaves the pieces back into the input's
shape. Written with the namespace it is given, so it serves the raw first-order
pass and (on Tensors) higher orders alike.
"""

from __future__ import annotations


from ...kernels import tile_views
from ._util import products_exact


def max_pool_tiles_vjp(ns, g, ans, x, *, kernel):
    # each view's share: g where that view holds its window's max and no earlier view did
    # (exactly 0 elsewhere: products where g is finite, as select() decides, else where)
    exact = products_exact(ns, g)
    product = getattr(ns, "_mask_product", None) if exact else None
    views = tile_views(x.ndim, kernel)
    # raw arrays of a backend that writes in place (the first-order pass): each share goes
    # straight into its strided view of one array; otherwise interleave the shares. Views
    # that tile x write every element once, so the array needs no zeros first
    out = None
    if getattr(ns, "_writes", False) and product is not None:
        tiled = all(n % k == 0 for n, k in zip(x.shape[x.ndim - len(kernel):], kernel))
        out = ns.empty_like(x) if tiled else ns.zeros_like(x)
    parts, taken = [], None
    for i, idx in enumerate(views):
        eq = x[idx] == ans
        last = i == len(views) - 1
        if out is not None:  # NumPy: "eq and not taken" as one bool comparison, taken kept in place
            take = eq if taken is None else eq > taken
            if taken is None:
                taken = eq  # take (the same array) is used up below before taken changes
            elif not last:
                taken |= eq
            product(g, take, out=out[idx])
            continue
        take = eq if taken is None else eq & ~taken
        if not last:
            taken = eq if taken is None else taken | eq
        if product is not None:
            parts.append(product(g, take))
        elif exact:
            parts.append(g * ns.astype(take, g.dtype))
        else:
            parts.append(ns.where(take, g, ns.zeros_like(g)))
    if out is not None:
        return out
    # (*lead, o_1..o_n, k_1..k_n) -> (*lead, o_1, k_1, ..., o_n, k_n) -> x's shape
    nd = len(kernel)
    lead = x.ndim - nd
    stacked = ns.reshape(ns.stack(parts, axis=-1), tuple(ans.shape) + tuple(kernel))
    perm = tuple(range(lead)) + tuple(a for i in range(nd) for a in (lead + i, lead + nd + i))
    return ns.reshape(ns.permute_dims(stacked, perm), tuple(x.shape))

