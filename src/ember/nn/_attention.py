"""Multi-head scaled dot-product attention.

``MultiHeadAttention`` matches ``torch.nn.MultiheadAttention(batch_first=True)``
with separate q/k/v projections (torch's ``in_proj_weight`` split in three
rows blocks). Masks are boolean with **True = may attend** (the JAX/Flax
convention; torch's boolean ``attn_mask`` is the opposite), or floating and
added to the scores.
"""

from __future__ import annotations

import math
from typing import Any

from .. import random as _random
from ..tree import field
from ._activations import softmax
from ._layers import Linear
from ._module import Module
from ._util import namespace

__all__ = ["MultiHeadAttention", "dot_product_attention"]

BAD_HEADS = "MultiHeadAttention: dim={dim} is not divisible by num_heads={heads}"
BAD_INPUT = (
    "MultiHeadAttention: {name} has shape {shape}; expected (batch, length, {dim}) or (length, {dim})"
)


def dot_product_attention(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False) -> Any:
    """``softmax(q @ k^T / sqrt(d) + mask) @ v`` over the last two axes.

    ``q``: ``(..., Lq, d)``, ``k``: ``(..., Lk, d)``, ``v``: ``(..., Lk, dv)``;
    ``mask`` broadcasts to ``(..., Lq, Lk)``.
    """
    xp = namespace(q, k, v)
    scores = xp.matmul(q, xp.matrix_transpose(k)) * (1.0 / math.sqrt(int(q.shape[-1])))
    lq, lk = int(q.shape[-2]), int(k.shape[-2])
    if causal:
        allowed = xp.arange(lk)[None, :] <= xp.arange(lq)[:, None]
        mask = allowed if mask is None else (mask & allowed)
    if mask is not None:
        if xp.isdtype(mask.dtype, "bool"):
            scores = xp.where(mask, scores, xp.full_like(scores, -math.inf))
        else:
            scores = scores + mask
    return xp.matmul(softmax(scores, axis=-1), v)


class MultiHeadAttention(Module):
    """Attention with ``num_heads`` heads: project, attend per head, concatenate, project.

    ``mha(query, key=None, value=None, *, mask=None, causal=False)``; key and
    value default to query (self-attention). Inputs are ``(B, L, dim)`` or
    unbatched ``(L, dim)``.
    """

    q_proj: Any
    k_proj: Any
    v_proj: Any
    out_proj: Any
    num_heads: int = field(static=True, default=1)

    @classmethod
    def init(
        cls,
        key: Any,
        dim: int,
        num_heads: int,
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        dtype: Any = None,
        xp: Any = None,
    ) -> MultiHeadAttention:
        """New layer; projections use PyTorch's default Linear initialisation."""
        if dim % num_heads:
            raise ValueError(BAD_HEADS.format(dim=dim, heads=num_heads))
        kq, kk, kv, ko = _random.split(key, 4)
        return cls(
            Linear.init(kq, dim, dim, bias=bias, dtype=dtype, xp=xp),
            Linear.init(kk, kdim or dim, dim, bias=bias, dtype=dtype, xp=xp),
            Linear.init(kv, vdim or dim, dim, bias=bias, dtype=dtype, xp=xp),
            Linear.init(ko, dim, dim, bias=bias, dtype=dtype, xp=xp),
            num_heads,
        )

    def _heads(self, xp: Any, x: Any) -> Any:
        b, length, d = (int(s) for s in x.shape)
        h = self.num_heads
        return xp.permute_dims(xp.reshape(x, (b, length, h, d // h)), (0, 2, 1, 3))

    def __call__(self, query: Any, key: Any = None, value: Any = None, *, mask: Any = None,
                 causal: bool = False) -> Any:
        key = query if key is None else key
        value = key if value is None else value
        xp = namespace(query, key, value, self.q_proj.weight)
        dim = int(self.q_proj.weight.shape[0])
        for name, a in (("query", query), ("key", key), ("value", value)):
            if a.ndim not in (2, 3):
                raise ValueError(BAD_INPUT.format(name=name, shape=tuple(a.shape), dim="dim"))
        batched = query.ndim == 3
        if not batched:
            query, key, value = (xp.expand_dims(a, axis=0) for a in (query, key, value))
        q = self._heads(xp, self.q_proj(query))
        k = self._heads(xp, self.k_proj(key))
        v = self._heads(xp, self.v_proj(value))
        o = dot_product_attention(q, k, v, mask=mask, causal=causal)  # (B, H, Lq, dh)
        b, lq = int(o.shape[0]), int(o.shape[2])
        o = xp.reshape(xp.permute_dims(o, (0, 2, 1, 3)), (b, lq, dim))
        y = self.out_proj(o)
        return y if batched else y[0, ...]
