"""Greedy multi-path block verification (Thomas & Pal, arXiv 2602.16961; docs/algorithms.md, GBV).

GBV selects the lexicographic maximum of the K i.i.d. draft paths under one total order of the
tokens at every node (key kappa = p/q unclipped, ties to the larger token index), replaces the
draft law along the selected path by the law of that maximum (the *skewed* draft q_skew), and
runs block verification on the selected path with q_skew.

Numerics: with r = A / qj (the probability mass of single paths strictly below the current node,
relative to the node's own path probability), the skewed law is
``q_skew(x) ∝ a^K - b^K`` with ``a = (r + cdf(x)) / (r + 1)``, ``b = a - q(x) / (r + 1)``, all in
[0, 1]; the difference is evaluated as ``(a - b) * sum_i a^i b^(K-1-i)`` (no cancellation, no
overflow for any K).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from specjax.typing import Array, PRNGKey
from specjax.verify.block import block_uniforms, block_verify_rows
from specjax.verify.common import (
    VerifyResult,
    check_multipath_inputs,
    compute_dtype,
    cut_at,
    gather_tokens,
    invalid_laws,
    normalize,
    take_row,
    valid_lengths,
)
from specjax.verify.rows import map_row_chunks
from specjax.verify.tree_walk import first_true, take_path_row

R_MAX = 1e30
"""Cap on r = A / qj (r -> inf means the skew has vanished: q_skew -> q)."""


def ranking_key(p: Array, q: Array) -> Array:
    """kappa = p / q, unclipped; +inf where q = 0 < p; 0 where p = q = 0 (never NaN)."""
    safe_q = jnp.where(q > 0.0, q, 1.0)
    return jnp.where(q > 0.0, p / safe_q, jnp.where(p > 0.0, jnp.inf, 0.0))


def mass_below(kappa: Array, q: Array, tokens: Array) -> Array:
    """Draft mass of the tokens ranked strictly below ``tokens [B]`` in the (kappa, index) order.

    Args:
      kappa: ``[B, V]`` ranking keys.
      q: ``[B, V]`` draft probabilities.
      tokens: int ``[B]``.

    Returns:
      ``[B]``.
    """
    vocab = jnp.arange(q.shape[-1])[None, :]
    t = jnp.maximum(tokens, 0)[:, None]
    k_t = jnp.take_along_axis(kappa, t, axis=-1)  # [B, 1]
    below = (kappa < k_t) | ((kappa == k_t) & (vocab < t))  # [B, V]
    return jnp.sum(jnp.where(below, q, 0.0), axis=-1)


def kappa_order(kappa: Array) -> Array:
    """``jnp.argsort(kappa, stable=True)`` (ascending; ties: smaller index first), exactly, in
    single-operand integer sorts.

    XLA sorts one integer operand several times faster than a (key, index) pair, so the key's
    bits (non-negative floats order like their bit patterns) are packed with the token index
    into one word. For float32 keys on CPU and GPU that is one sort of 64-bit words (32 key
    bits, 32 index bits), which XLA:CPU sorts as fast as 32-bit ones; elsewhere, and for
    float64 keys, the bits are sorted least significant digit first in 32-bit (64-bit) words,
    each digit packed with the current position: every pass is stable, so after the last one
    the order is by (kappa, index) (2 passes for float32 and V <= 2^16).

    Args:
      kappa: ``[..., V]`` non-negative ranking keys (+inf allowed, no NaN).

    Returns:
      int32 ``[..., V]``: the token at each rank.
    """
    if kappa.dtype == jnp.float32:
        rows = kappa.reshape(-1, kappa.shape[-1])
        order = lax.platform_dependent(
            rows, cpu=kappa_order_packed, cuda=kappa_order_packed, default=kappa_order_digits
        )
        return order.reshape(kappa.shape)
    return kappa_order_digits(kappa)


def _key_bits(kappa: Array, utype) -> Array:
    """The keys' bit patterns (``+0.0`` for ``-0.0``), ordered like the keys."""
    return lax.bitcast_convert_type(jnp.where(kappa > 0.0, kappa, 0.0), utype)


def kappa_order_packed(kappa: Array) -> Array:
    """:func:`kappa_order` for float32 ``[rows, V]``: one sort of ``key bits << 32 | index``."""
    v = kappa.shape[-1]
    bits = _key_bits(kappa, jnp.uint32)
    with jax.enable_x64(True):  # 64-bit words inside this block only; the result is int32
        index = jnp.arange(v, dtype=jnp.uint64)
        packed = (bits.astype(jnp.uint64) << jnp.uint64(32)) | index
        rank = lax.sort(packed, dimension=kappa.ndim - 1) & jnp.uint64(0xFFFFFFFF)
        return rank.astype(jnp.int32)


def kappa_order_digits(kappa: Array) -> Array:
    """:func:`kappa_order` in word-sized sorts of (key digit, position), LSD first."""
    v = kappa.shape[-1]
    word = jnp.finfo(kappa.dtype).bits  # 32, or 64 under x64
    utype = jnp.uint32 if word == 32 else jnp.uint64
    bits = _key_bits(kappa, utype)
    index_bits = max(1, math.ceil(math.log2(v)))
    width = word - index_bits  # key bits per pass
    position = jnp.broadcast_to(jnp.arange(v, dtype=utype), kappa.shape)
    order = None
    for shift in range(0, word - 1, width):  # the sign bit is 0
        digit = (bits >> utype(shift)) & utype((1 << width) - 1)
        if order is not None:
            digit = jnp.take_along_axis(digit, order, axis=-1)  # in the current order
        packed = lax.sort((digit << utype(index_bits)) | position, dimension=kappa.ndim - 1)
        rank = (packed & utype((1 << index_bits) - 1)).astype(jnp.int32)
        order = rank if order is None else jnp.take_along_axis(order, rank, axis=-1)
    return order


def skewed_draft(p: Array, q: Array, r: Array, num_paths: int) -> Array:
    """Law of the next token of the maximum of K i.i.d. paths given that it passes the node.

    Args:
      p: ``[..., V]`` target distribution at the node.
      q: ``[..., V]`` draft distribution at the node.
      r: ``[...]`` A / qj for the node (0 at the root).
      num_paths: K.

    Returns:
      ``[..., V]`` q_skew, normalised (falls back to q if it has no mass).
    """
    shape = q.shape
    p, q, r = p.reshape(-1, shape[-1]), q.reshape(-1, shape[-1]), r.reshape(-1)  # [rows, V], [rows]
    order = kappa_order(ranking_key(p, q))  # [rows, V] ascending; ties: smaller index first
    q_sorted = jnp.take_along_axis(q, order, axis=-1)  # [rows, V]
    cdf = jnp.cumsum(q_sorted, axis=-1)  # inclusive
    scale = 1.0 / (r[:, None] + 1.0)
    a = jnp.clip((r[:, None] + cdf) * scale, 0.0, 1.0)
    b = jnp.clip(a - q_sorted * scale, 0.0, 1.0)
    geometric = sum(a**i * b ** (num_paths - 1 - i) for i in range(num_paths))
    skew_sorted = q_sorted * scale * geometric  # (a - b) * sum_i a^i b^(K-1-i)
    rows = jnp.arange(q.shape[0])[:, None]
    skew = jnp.zeros_like(q).at[rows, order].set(skew_sorted)
    return normalize(skew, q).reshape(shape)


def gbv_select(
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    n: Array,
    bad: Array | None = None,
) -> tuple[Array, Array, Array]:
    """The greedy path selection and the skewed draft rows along the selected path.

    The walk over depths needs only the candidates' keys and one masked sum per depth (the
    draft mass ranked below the chosen token, which gives the next node's r = A / qj); the
    full orders, for the skewed rows, are then sorted for all depths at once.

    Args:
      draft_tokens: int ``[B, K, L]``.
      draft_probs: ``[B, K, L, V]`` float.
      target_probs: ``[B, K, L+1, V]`` float.
      n: int32 ``[B, K]`` valid length per path, cut at the first bad law.
      bad: optional bool ``[B, K, L]``: draft laws that are not probability vectors, read as
        zeros (None: none).

    Returns:
      ``(path [B], length [B], q_skew [B, L, V])``: the selected path (smallest index among equal
      paths), its valid length, and the skewed draft rows (rows past ``length`` are unused).
      For K = 1 the rows are the draft rows themselves.
    """
    b, k, l = draft_tokens.shape
    bad = jnp.zeros((b, k, l), bool) if bad is None else bad

    def depth(d: int, carry):
        alive, length, r = carry
        tokens_d = draft_tokens[:, :, d]  # [B, K]
        rep = first_true(alive)
        p_d = take_path_row(target_probs, rep, d)  # [B, V]
        q_d = take_path_row(draft_probs, rep, d)  # [B, V]
        # A select, not arithmetic: no NaN of a bad law reaches the masses (NaN * 0 = NaN).
        q_d = jnp.where(take_path_row(bad[..., None], rep, d), jnp.zeros((), q_d.dtype), q_d)
        candidates = alive & (d < n) & (tokens_d >= 0)
        has_child = jnp.any(candidates, axis=-1)
        kappa_c = ranking_key(gather_tokens(p_d, tokens_d), gather_tokens(q_d, tokens_d))
        kappa_c = jnp.where(candidates, kappa_c, -jnp.inf)  # [B, K]
        best_kappa = jnp.max(kappa_c, axis=-1, keepdims=True)
        ties = candidates & (kappa_c == best_kappa)
        chosen = jnp.max(jnp.where(ties, tokens_d, -1), axis=-1)  # larger index wins ties
        q_chosen = gather_tokens(q_d, chosen[:, None])[:, 0]
        below = mass_below(ranking_key(p_d, q_d), q_d, chosen)
        r_next = jnp.where(
            q_chosen > 0.0, (r + below) / jnp.where(q_chosen > 0.0, q_chosen, 1.0), R_MAX
        )
        r_child = jnp.where(has_child, jnp.minimum(r_next, R_MAX), r)
        alive = jnp.where(has_child[:, None], candidates & (tokens_d == chosen[:, None]), alive)
        return alive, length + has_child.astype(jnp.int32), r_child

    # Unrolled over the static depths (a loop inside a decode step splits its GPU graph), each
    # after the first under a lax.cond that skips it where no row has a child there (nothing
    # would change). The conditional materialises the carry, as a loop's: unrolled without one,
    # XLA fused the earlier depths' decisions into every pass over V.
    carry = (jnp.ones((b, k), bool), jnp.zeros((b,), jnp.int32), jnp.zeros((b,), draft_probs.dtype))
    r = [carry[2]]  # [B] each: node d's r
    carry = depth(0, carry)
    for d in range(1, l):
        r.append(carry[2])
        idle = ~jnp.any(carry[0] & (d < n) & (draft_tokens[:, :, d] >= 0))
        carry = lax.cond(idle, lambda c: c, functools.partial(depth, d), carry)
    alive, length, _ = carry
    r = jnp.stack(r)  # [L, B]
    path = first_true(alive)
    # The selected path's rows are its nodes' rows (paths sharing a prefix share its rows).
    q_rows = take_row(draft_probs, path)  # [B, L, V]
    q_rows = jnp.where(take_row(bad, path)[..., None], jnp.zeros((), q_rows.dtype), q_rows)
    if k == 1:
        return path, length, q_rows
    p_rows = take_row(target_probs, path)[:, :l]  # [B, L, V]
    return path, length, skewed_draft(p_rows, q_rows, jnp.moveaxis(r, 0, 1), k)


def gbv_verify(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    *,
    num_draft: Array | None = None,
) -> VerifyResult:
    """Greedy multi-path block verification over K i.i.d. draft paths.

    Args:
      key: PRNG key (raw ``uint32[2]`` or typed), or one per row (``[B]``: row b as if
        verified alone with ``key[b]``).
      draft_tokens: int ``[B, K, L]`` i.i.d. draft paths (-1 = padding).
      draft_probs: ``[B, K, L, V]``; paths sharing a prefix carry identical rows for it.
      target_probs: ``[B, K, L+1, V]``; row (k, L) is the bonus distribution after path k.
      num_draft: optional int ``[B, K]`` valid tokens per path.

    Returns:
      VerifyResult, each int32 ``[B]``; ``path`` is the selected path. K = 1 is exactly
      :func:`block_verify`, bit for bit.
    """
    b, _, l, _ = check_multipath_inputs(
        "gbv_verify", draft_tokens, draft_probs, target_probs, num_draft
    )
    dtype = compute_dtype(draft_probs, target_probs)
    draft_probs = draft_probs.astype(dtype)
    n = valid_lengths(num_draft, draft_tokens, draft_probs.shape[-1])
    bad = invalid_laws(draft_probs)  # [B, K, L]: on the whole input (a chunk is copied first)
    n = cut_at(bad, n)
    eta, u_y = block_uniforms(key, b, l, dtype)
    return map_row_chunks(
        gbv_rows, draft_tokens, draft_probs, target_probs.astype(dtype), n, bad, eta, u_y
    )


def gbv_rows(
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    n: Array,
    bad: Array,
    eta: Array,
    u_y: Array,
) -> VerifyResult:
    """GBV on validated, float inputs with valid lengths ``n [B, K]`` (cut at the first draft
    law that is not a probability vector, ``bad [B, K, L]``) and the uniforms of
    :func:`~specjax.verify.block.block_uniforms`."""
    l = draft_tokens.shape[-1]
    path, length, q_skew = gbv_select(draft_tokens, draft_probs, target_probs, n, bad)
    tokens = jnp.where(jnp.arange(l)[None, :] < length[:, None], take_row(draft_tokens, path), -1)
    result = block_verify_rows(tokens, q_skew, take_row(target_probs, path), length, eta, u_y)
    return result._replace(path=path)
