"""Shared plumbing of the verifiers: result pytree, input checks, keys and sampling.

Nothing here knows about a particular verification rule. Shapes use the glossary of
:mod:`specjax.typing`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey


class VerifyResult(NamedTuple):
    """Outcome of one verification step (a pytree; every field is int32 ``[B]``).

    Attributes:
      num_accepted: tau, the number of accepted draft tokens ``[B]``.
      next_token: the correction token if tau < (valid) draft length, else the bonus token ``[B]``.
      path: index of a draft path whose first tau tokens were accepted ``[B]`` (0 for chains).
    """

    num_accepted: Array
    next_token: Array
    path: Array


def compute_dtype(*arrays: Array) -> jnp.dtype:
    """fp32 at least; fp64 when the inputs already are fp64 (x64 mode, used by exact tests)."""
    dtype = jnp.result_type(*arrays)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.float32
    return jnp.promote_types(dtype, jnp.float32)


def split_key(key: PRNGKey, num: int) -> tuple[PRNGKey, ...]:
    """Splits a raw ``uint32[2]`` or typed key into ``num`` keys."""
    return tuple(jax.random.split(key, num))


def is_row_keys(key: PRNGKey) -> bool:
    """Whether ``key`` holds one key per batch row: typed ``[B]`` or raw ``uint32[B, 2]``."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key.ndim == 1
    return key.ndim == 2


def check_key(key) -> None:
    """One clear ``TypeError`` unless ``key`` is one PRNG key or one per row: typed ``[]`` or
    ``[B]``, raw ``uint32[2]`` or ``uint32[B, 2]``."""
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == jnp.uint32 and key.ndim in (1, 2) and key.shape[-1] == 2
    if not (typed and key.ndim in (0, 1)) and not raw:
        shown = f"{dtype}{list(key.shape)}" if dtype is not None else type(key).__name__
        raise TypeError(
            "key must be jax.random.key(seed) or jax.random.PRNGKey(seed), or one per row "
            f"([B] typed or uint32[B, 2]), got {shown}"
        )


def verifier_uniforms(key: PRNGKey, batch: int, shape: tuple, dtype) -> tuple[Array, Array]:
    """A verifier's randomness: ``(u [B, *shape], u_y [B, 2])``, the acceptance tests and the
    emitted token's draw (:func:`sample_with`).

    ``key`` is one key for the batch, or one key per row (``[B]``; see :func:`is_row_keys`).
    With per-row keys row b gets exactly what a batch of one verified with ``key[b]`` gets, so
    a row's outcome depends on its own key and inputs only: decoding passes one key per row and
    verifies the whole batch in one call.
    """
    check_key(key)
    if is_row_keys(key):
        if key.shape[0] != batch:
            raise ValueError(f"per-row keys must be [B] = [{batch}], got {tuple(key.shape)}")
        u, u_y = jax.vmap(lambda k: verifier_uniforms(k, 1, shape, dtype))(key)
        return u[:, 0], u_y[:, 0]
    key_u, key_y = split_key(key, 2)
    u = jax.random.uniform(key_u, (batch, *shape), dtype)
    return u, correction_uniforms(key_y, batch, dtype)


def check_chain_inputs(
    name: str,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    num_draft: Array | None,
) -> tuple[int, int, int]:
    """Validates chain-verifier shapes; returns (B, L, V) or raises one clear ValueError."""
    _check_arrays(name, draft_tokens, draft_probs, target_probs)
    if draft_tokens.ndim != 2:
        raise ValueError(
            f"{name}: draft_tokens must be [B, L], got shape {tuple(draft_tokens.shape)}; "
            "multi-path drafts [B, K, L] go to gbv_verify / specinfer_verify / spectr_verify."
        )
    b, l = draft_tokens.shape
    if draft_probs.ndim != 3 or draft_probs.shape[:2] != (b, l):
        raise ValueError(
            f"{name}: draft_probs must be [B, L, V] = [{b}, {l}, V] to match draft_tokens "
            f"{tuple(draft_tokens.shape)}, got {tuple(draft_probs.shape)}."
        )
    v = draft_probs.shape[-1]
    if target_probs.shape != (b, l + 1, v):
        raise ValueError(
            f"{name}: target_probs must be [B, L+1, V] = [{b}, {l + 1}, {v}] (draft_probs is "
            f"{tuple(draft_probs.shape)}), got {tuple(target_probs.shape)}; a vocab mismatch "
            "between draft and target must be fixed before verification."
        )
    _check_sizes(name, B=b, L=l, V=v)
    _check_num_draft(name, num_draft, (b,), "[B]")
    _check_integer(name, draft_tokens)
    return b, l, v


def check_multipath_inputs(
    name: str,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    num_draft: Array | None,
) -> tuple[int, int, int, int]:
    """Validates multi-path shapes; returns (B, K, L, V) or raises one clear ValueError."""
    _check_arrays(name, draft_tokens, draft_probs, target_probs)
    if draft_tokens.ndim != 3:
        raise ValueError(
            f"{name}: draft_tokens must be [B, K, L], got shape {tuple(draft_tokens.shape)}; "
            "a single chain [B, L] can be passed as [B, 1, L]."
        )
    b, k, l = draft_tokens.shape
    if draft_probs.ndim != 4 or draft_probs.shape[:3] != (b, k, l):
        raise ValueError(
            f"{name}: draft_probs must be [B, K, L, V] = [{b}, {k}, {l}, V] to match draft_tokens "
            f"{tuple(draft_tokens.shape)}, got {tuple(draft_probs.shape)}."
        )
    v = draft_probs.shape[-1]
    if target_probs.shape != (b, k, l + 1, v):
        raise ValueError(
            f"{name}: target_probs must be [B, K, L+1, V] = [{b}, {k}, {l + 1}, {v}] (draft_probs "
            f"is {tuple(draft_probs.shape)}), got {tuple(target_probs.shape)}; a vocab mismatch "
            "between draft and target must be fixed before verification."
        )
    _check_sizes(name, B=b, K=k, L=l, V=v)
    _check_num_draft(name, num_draft, (b, k), "[B, K]")
    _check_integer(name, draft_tokens)
    return b, k, l, v


def _check_sizes(name: str, **dims: int) -> None:
    empty = [f"{d} = {n}" for d, n in dims.items() if n < 1]
    if empty:
        raise ValueError(
            f"{name}: every dimension must be >= 1, got {', '.join(empty)}; an empty batch has "
            "nothing to verify, and an empty draft is num_draft = 0 with L >= 1."
        )


def _check_arrays(name: str, draft_tokens, draft_probs, target_probs) -> None:
    given = {"draft_tokens": draft_tokens, "draft_probs": draft_probs, "target_probs": target_probs}
    for what, x in given.items():
        if not hasattr(x, "dtype"):
            raise TypeError(
                f"{name}: {what} must be an array (jnp.asarray), got {type(x).__name__}"
            )
    for what, x in (("draft_probs", draft_probs), ("target_probs", target_probs)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{name}: {what} must hold probabilities (floating), got {x.dtype}")


def _check_num_draft(name: str, num_draft: Array | None, shape: tuple[int, ...], letters: str):
    if num_draft is not None and not jnp.issubdtype(jnp.result_type(num_draft), jnp.integer):
        raise TypeError(
            f"{name}: num_draft must be integer counts, got {jnp.result_type(num_draft)}"
        )
    if num_draft is not None and tuple(jnp.shape(num_draft)) != shape:
        raise ValueError(
            f"{name}: num_draft must be {letters} = {list(shape)}, got shape "
            f"{tuple(jnp.shape(num_draft))}."
        )


def _check_integer(name: str, draft_tokens: Array):
    if not jnp.issubdtype(draft_tokens.dtype, jnp.integer):
        raise ValueError(
            f"{name}: draft_tokens must be integer token ids, got {draft_tokens.dtype}."
        )


def invalid_laws(draft_probs: Array) -> Array:
    """Which draft laws are not probability vectors: a NaN, an infinity or a negative entry.

    Args:
      draft_probs: ``[..., L, V]``.

    Returns:
      bool ``[..., L]``.
    """
    # Two plain reductions: XLA:CPU runs a reduction of an input at memory speed but writes an
    # elementwise test out in full before reducing it (4-6x a read). NaN and +-inf make the sum
    # NaN or infinite, a negative entry or -inf the minimum negative (the minimum alone would
    # not do: XLA:CPU's skips NaN). A row whose finite entries overflow the sum is no law either.
    total = jnp.sum(draft_probs, axis=-1)
    low = jnp.min(draft_probs, axis=-1)
    return ~(jnp.isfinite(total) & (low >= 0))


def cut_at(bad: Array, n: Array | None) -> Array:
    """``n`` (clipped to [0, L]; L where None) cut at the first True of ``bad``.

    Args:
      bad: bool ``[..., L]``, e.g. :func:`invalid_laws`.
      n: optional int ``[...]``.

    Returns:
      int32 ``[...]``.
    """
    length = bad.shape[-1]
    first_bad = jnp.where(jnp.any(bad, axis=-1), jnp.argmax(bad, axis=-1), length)
    n = length if n is None else jnp.clip(jnp.asarray(n, jnp.int32), 0, length)
    return jnp.minimum(n, first_bad).astype(jnp.int32)


def sanitize_draft(draft_probs: Array, num_draft: Array | None) -> tuple[Array, Array]:
    """Ends every draft path at its first law that is not a probability vector.

    A draft law (a row ``draft_probs[..., i, :]``) with a NaN, an infinity or a negative entry
    says nothing about how token i was drawn: a broken drafter (NaN weights, an overflowing
    logit) produces such laws, and every verifier would then accept garbage (a NaN ratio
    compares false, so block verification reads it as q = 0 and accepts the token with
    certainty). Every verifier cuts the path at its first such position, exactly as if the
    drafter had proposed fewer tokens (``num_draft`` shortened), and no NaN from a bad row
    reaches the arithmetic it keeps (masked arithmetic does not stop it: NaN * 0 = NaN). This
    function returns the cut and the laws with the bad rows zeroed; the verifiers make the same
    cut (:func:`invalid_laws`, :func:`cut_at`) inside their own passes and select (``where``)
    where a bad row could reach their results, instead of copying the laws.

    Why the output stays exactly the target's law: the cut position depends only on the
    draft's own laws, and the law at position i is a function of the path's tokens before i
    (paths sharing a prefix carry identical rows, so a bad row cuts every path through that
    tree node). The cut draft is therefore what a drafter proposes that stops at a node whose
    next law it cannot state: its length is a stopping time of its own tokens, never a function
    of the target. Every verifier is exact for such drafts. Token verification, SpecInfer and
    SpecTr decide node by node, and at each node the emitted token's law given that the walk
    reached it is the target's whatever the number of candidates there (none at a cut node:
    the token is drawn from the target row). Block verification cut at N (``h_N = w_N``)
    emits the same law as block verification of the draft continued past N with the target's
    own laws (there p / q = 1, so w stays w_N, Z = 0 and only the last position can stop),
    which is a legitimate draft and hence exact; GBV is block verification of the selected
    path under its skewed law, and the subtree masses its skew is computed from do not depend
    on where other paths end, so the selected path is again a draft whose length is a
    stopping time of its own tokens. (Tests: ``tests/test_verify_invalid_laws.py``: a draft
    with a bad law gives bit for bit the results of the draft cut there, for every verifier
    and key.)

    Args:
      draft_probs: ``[B, L, V]`` or ``[B, K, L, V]``.
      num_draft: optional int ``[B]`` or ``[B, K]``.

    Returns:
      ``(draft_probs, num_draft)``: the laws with the bad rows zeroed (same shape and dtype)
      and int32 ``draft_probs.shape[:-2]``, ``num_draft`` clipped to [0, L] and cut at the
      first bad law.
    """
    bad = invalid_laws(draft_probs)  # [..., L]
    clean = jnp.where(bad[..., None], jnp.zeros((), draft_probs.dtype), draft_probs)
    return clean, cut_at(bad, num_draft)


def valid_lengths(num_draft: Array | None, draft_tokens: Array, vocab_size: int) -> Array:
    """Valid draft length per row (or per row and path): ``num_draft`` clipped to [0, L] and cut
    at the first padding token (-1), since a draft ends where its padding starts. A token id
    outside ``[0, V)`` ends the draft the same way: it and everything after it is rejected,
    never accepted.

    Args:
      num_draft: optional int ``[B]`` (chain) or ``[B, K]`` (multi-path).
      draft_tokens: int ``[B, L]`` or ``[B, K, L]``.
      vocab_size: V.

    Returns:
      int32 ``draft_tokens.shape[:-1]``.
    """
    length = draft_tokens.shape[-1]
    is_pad = (draft_tokens < 0) | (draft_tokens >= vocab_size)
    first_pad = jnp.where(jnp.any(is_pad, axis=-1), jnp.argmax(is_pad, axis=-1), length)
    if num_draft is None:
        return first_pad.astype(jnp.int32)
    n = jnp.clip(jnp.asarray(num_draft, jnp.int32), 0, length)
    return jnp.minimum(n, first_pad).astype(jnp.int32)


def take_token_prob(probs: Array, tokens: Array) -> Array:
    """``probs[..., tokens]`` for tokens ``[...]`` and probs ``[..., V]``; 0 for pad (-1)."""
    idx = jnp.clip(tokens, 0, probs.shape[-1] - 1)
    gathered = jnp.take_along_axis(probs, idx[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return jnp.where(tokens >= 0, gathered, 0.0)


def gather_tokens(probs: Array, tokens: Array) -> Array:
    """``probs[b, tokens[b, k]]``: probs ``[B, V]``, tokens ``[B, K]`` -> ``[B, K]``; 0 for -1."""
    idx = jnp.clip(tokens, 0, probs.shape[-1] - 1).astype(jnp.int32)
    return jnp.where(tokens >= 0, jnp.take_along_axis(probs, idx, axis=-1), 0.0)


def take_row(probs: Array, index: Array) -> Array:
    """Row ``index [B]`` of ``probs [B, rows, ...]`` -> ``[B, ...]`` (e.g. ``[B, rows, V]`` ->
    ``[B, V]``, or one path of ``[B, K, L, V]`` -> ``[B, L, V]``)."""
    index = index.astype(jnp.int32).reshape(-1, *([1] * (probs.ndim - 1)))
    return jnp.take_along_axis(probs, index, axis=1)[:, 0]


BLOCK = 256
"""Vocabulary block size of the two-level inverse-CDF sampler (and the least of the argmax's)."""

ARGMAX_BLOCK = 4096
"""Largest vocabulary block of :func:`argmax_first`: a divisor of V, so no padded copy is made."""


def row_blocks(x: Array, fill, c: int | None = None) -> tuple[Array, int]:
    """``x [..., V]`` padded with ``fill`` and reshaped to ``[..., V / c, c]`` (c: the vocabulary
    block size, :data:`BLOCK` unless given); returns (x, c)."""
    v = x.shape[-1]
    c = min(BLOCK if c is None else c, v)
    pad = -v % c
    if pad:
        x = jnp.concatenate([x, jnp.full((*x.shape[:-1], pad), fill, x.dtype)], axis=-1)
    return x.reshape(*x.shape[:-1], -1, c), c


def _argmax_block(v: int) -> int:
    """The largest divisor of ``v`` in [BLOCK, ARGMAX_BLOCK], else BLOCK (then V is padded)."""
    return max((c for c in range(BLOCK, ARGMAX_BLOCK + 1) if v % c == 0), default=BLOCK)


def argmax_first(x: Array, *, reread: bool = False) -> Array:
    """``jnp.argmax(x, -1)`` (first maximal index) in two levels: block maxima, then one block.

    Same result as ``jnp.argmax`` for non-NaN input, and several times faster on CPU, where
    XLA's variadic (value, index) reduction is slow. int32 ``[...]``.

    ``reread``: take the maximum in a second pass over x instead of from the block maxima. For
    an x computed with a transcendental (Gumbel-max's log), XLA:CPU then writes x out once;
    with one pass it writes the log out on its own and x again (1.6x the time).
    """
    blocks, c = row_blocks(x, -jnp.inf, _argmax_block(x.shape[-1]))  # [..., nb, c]
    block_max = jnp.max(blocks, axis=-1)  # [..., nb]
    if not reread:  # else XLA rewrites the max of the block maxima as a pass over x
        block_max = jax.lax.optimization_barrier(block_max)
    top = jnp.max(block_max, axis=-1, keepdims=True)
    nb = block_max.shape[-1]
    j = jnp.min(jnp.where(block_max == top, jnp.arange(nb), nb), axis=-1)  # first block with it
    j = jnp.minimum(j, nb - 1)
    inner = jnp.take_along_axis(blocks, j[..., None, None], axis=-2)[..., 0, :]  # [..., c]
    i = jnp.min(jnp.where(inner == top, jnp.arange(c), c), axis=-1)
    return (j * c + jnp.minimum(i, c - 1)).astype(jnp.int32)


def argmax_product(a: Array, b: Array) -> Array:
    """:func:`argmax_first` of ``a * b`` (non-negative ``[..., V]`` each), reading ``a`` and
    ``b`` instead of their product: XLA:CPU fuses a product into the blocked argmax's passes
    several times slower than it reads two inputs (20 ms against 4.5 ms at ``[64, 5, 32768]``).
    The block maxima of the product come from one fused pass; the winning block's product is
    formed again from its two slices, the same float32 products, so the index is identical.
    int32 ``[...]``."""
    c = _argmax_block(a.shape[-1])
    blocks_a, c = row_blocks(a, 0.0, c)  # [..., nb, c]
    blocks_b, _ = row_blocks(b, 0.0, c)
    block_max = jax.lax.optimization_barrier(jnp.max(blocks_a * blocks_b, axis=-1))  # [..., nb]
    top = jnp.max(block_max, axis=-1, keepdims=True)
    nb = block_max.shape[-1]
    j = jnp.minimum(jnp.min(jnp.where(block_max == top, jnp.arange(nb), nb), axis=-1), nb - 1)
    pick = lambda x: jnp.take_along_axis(x, j[..., None, None], axis=-2)[..., 0, :]  # [..., c]
    i = jnp.min(jnp.where(pick(blocks_a) * pick(blocks_b) == top, jnp.arange(c), c), axis=-1)
    return (j * c + jnp.minimum(i, c - 1)).astype(jnp.int32)


def inverse_cdf(weights: Array, u: Array) -> Array:
    """Index of ``u [B]`` times the total mass in the CDF of ``weights [B, n]`` (positive only)."""
    cdf = jnp.cumsum(weights, axis=-1)
    index = jnp.sum(cdf <= u[:, None] * cdf[:, -1:], axis=-1)
    last_positive = jnp.max(jnp.where(weights > 0, jnp.arange(weights.shape[-1]), 0), axis=-1)
    return jnp.minimum(index, last_positive)  # guards u * total rounding up to the total


def correction_uniforms(key: PRNGKey, batch: int, dtype) -> Array:
    """The two uniforms per row that :func:`sample_with` consumes, ``[B, 2]``."""
    return jax.random.uniform(key, (2, batch), dtype).T


def sample_weights(key: PRNGKey, weights: Array, fallback: Array) -> Array:
    """Samples one token per row from unnormalised ``weights [B, V]`` (exact inverse CDF).

    :func:`sample_with` on the uniforms :func:`correction_uniforms` draws from ``key``.

    Returns:
      int32 ``[B]`` token ids, always with positive weight (or positive fallback weight).
    """
    u = correction_uniforms(key, weights.shape[0], weights.dtype)
    return sample_with(u, weights, fallback)


def sample_with(u: Array, weights: Array, fallback: Array) -> Array:
    """Samples one token per row from unnormalised ``weights [B, V]`` given uniforms ``u [B, 2]``.

    Two levels, two uniforms per row: a block of c = 256 tokens is drawn with probability
    proportional to its mass, then a token inside it proportional to its weight. One read of
    the weights instead of V random numbers per row. Rows whose weights have no positive mass
    (a residual that is empty up to float drift) are sampled from ``fallback [B, V]``, so the
    result is never NaN or an arbitrary id.

    Returns:
      int32 ``[B]`` token ids, always with positive weight (or positive fallback weight).
    """
    blocks, c = row_blocks(jnp.maximum(weights, 0.0), 0.0)  # [B, nb, c]
    # A row has no positive mass iff its block sums add up to 0 (terms >= 0 never cancel), so
    # no pass over V decides it (XLA:CPU writes out every [B, V] operand it reduces; the
    # barrier keeps XLA from rewriting the sum of the sums as such a pass). The fallback's
    # blocks are summed only when some row needs them.
    sums = jax.lax.optimization_barrier(jnp.sum(blocks, axis=-1))  # [B, nb]
    empty = jnp.sum(sums, axis=-1, keepdims=True) <= 0.0  # [B, 1]
    fallback_sums = lambda: jnp.sum(row_blocks(jnp.maximum(fallback, 0.0), 0.0)[0], axis=-1)
    sums = jax.lax.cond(
        jnp.any(empty), lambda: jnp.where(empty, fallback_sums(), sums), lambda: sums
    )
    u = u.astype(blocks.dtype)
    j = inverse_cdf(sums, u[:, 0])  # [B]
    pick = lambda x: jnp.take_along_axis(x, j[:, None, None], axis=1)[:, 0]  # [B, c]
    inner = jnp.where(empty, jnp.maximum(pick(row_blocks(fallback, 0.0)[0]), 0.0), pick(blocks))
    return (j * c + inverse_cdf(inner, u[:, 1])).astype(jnp.int32)


def normalize(weights: Array, fallback: Array) -> Array:
    """``weights / sum(weights)`` along V, or ``fallback`` where the sum is not positive."""
    total = jnp.sum(weights, axis=-1, keepdims=True)
    safe = jnp.where(total > 0.0, total, 1.0)
    return jnp.where(total > 0.0, weights / safe, fallback)
