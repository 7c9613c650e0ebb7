"""Synthetic, context-dependent draft/target families for demos, benchmarks and tests.

A family defines, for every prefix, a target distribution p(·|prefix) and a draft distribution
q(·|prefix) over V tokens without any model: the logits at a node are Gaussian draws seeded by a
rolling hash of the prefix, so paths that share a prefix see identical rows (as the verifiers
require) and sampling K draft paths of length L is one jitted program.

    target logits = sharpness * N_depth + context * N_prefix
    draft logits  = target logits + draft_noise * N'_prefix

``draft_noise`` controls how well the draft agrees with the target (0 = identical).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey


@dataclasses.dataclass(frozen=True)
class SyntheticFamily:
    """A synthetic draft/target pair.

    Attributes:
      vocab_size: V.
      sharpness: scale of the per-depth logits shared by all prefixes (peakedness).
      context: scale of the prefix-dependent part of the target logits.
      draft_noise: scale of the draft's deviation from the target logits.
      seed: seed of the family (the same seed gives the same distributions).
    """

    vocab_size: int = 64
    sharpness: float = 2.0
    context: float = 1.0
    draft_noise: float = 0.7
    seed: int = 0

    def __post_init__(self):
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {self.vocab_size}")
        if min(self.sharpness, self.context, self.draft_noise) < 0:
            raise ValueError("sharpness, context and draft_noise must be >= 0")


FAMILIES: dict[str, SyntheticFamily] = {
    "close": SyntheticFamily(sharpness=2.0, context=1.0, draft_noise=0.4),
    "medium": SyntheticFamily(sharpness=2.0, context=1.0, draft_noise=0.9),
    "far": SyntheticFamily(sharpness=2.0, context=1.0, draft_noise=1.6),
    "flat": SyntheticFamily(sharpness=0.5, context=0.5, draft_noise=0.5),
}
"""Named presets (vocab_size is set per use with ``dataclasses.replace``)."""


class Draft(NamedTuple):
    """A batch of sampled multi-path drafts (the verifiers' inputs).

    Attributes:
      tokens: int32 ``[B, K, L]``.
      draft_probs: ``[B, K, L, V]`` the law each token was drawn from.
      target_probs: ``[B, K, L+1, V]`` the target at each node, row L the bonus.
    """

    tokens: Array
    draft_probs: Array
    target_probs: Array


def _hash(prefix_hash: Array, token: Array) -> Array:
    return prefix_hash * jnp.uint32(1000003) + token.astype(jnp.uint32) + jnp.uint32(1)


def node_probs(family: SyntheticFamily, prefix_hash: Array, depth: int) -> tuple[Array, Array]:
    """Target and draft distributions at the nodes with the given prefix hashes.

    Args:
      family: the family.
      prefix_hash: uint32 ``[...]`` rolling hashes of the prefixes.
      depth: the prefixes' length (static).

    Returns:
      ``(p, q)``, each float32 ``[..., V]``.
    """
    base = jax.random.key(family.seed)
    k_depth, k_ctx, k_draft = jax.random.split(jax.random.fold_in(base, depth), 3)
    v = family.vocab_size

    def noise(key, h):
        return jax.random.normal(jax.random.fold_in(key, h), (v,))

    flat = prefix_hash.reshape(-1)
    ctx = jax.vmap(lambda h: noise(k_ctx, h))(flat)  # [n, V]
    dev = jax.vmap(lambda h: noise(k_draft, h))(flat)  # [n, V]
    target_logits = family.sharpness * jax.random.normal(k_depth, (v,)) + family.context * ctx
    draft_logits = target_logits + family.draft_noise * dev
    shape = (*prefix_hash.shape, v)
    p = jax.nn.softmax(target_logits, axis=-1).reshape(shape)
    q = jax.nn.softmax(draft_logits, axis=-1).reshape(shape)
    return p, q


def sample_draft(
    key: PRNGKey,
    family: SyntheticFamily,
    batch: int,
    num_paths: int,
    length: int,
    *,
    replacement: bool = True,
) -> Draft:
    """Samples K draft paths of length L per row from the family's draft.

    Args:
      key: PRNG key.
      family: the draft/target family.
      batch: B (each row has its own root prefix).
      num_paths: K.
      length: L.
      replacement: True for i.i.d. paths; False draws the K root children without replacement
        (Gumbel-top-K, in path-index order) and continues each path as its own chain.

    Returns:
      A :class:`Draft` with ``[B, K, L]`` tokens and the rows they were drawn from.
    """
    if not replacement and num_paths > family.vocab_size:
        raise ValueError(
            f"cannot draw {num_paths} distinct root children from a vocabulary of "
            f"{family.vocab_size}"
        )
    b, k = batch, num_paths
    h = jnp.broadcast_to(jnp.arange(b, dtype=jnp.uint32)[:, None], (b, k))  # [B, K]
    tokens, q_rows, p_rows = [], [], []
    for d in range(length):
        p, q = node_probs(family, h, d)  # [B, K, V]
        key, sub = jax.random.split(key)
        logq = jnp.log(jnp.maximum(q, jnp.finfo(q.dtype).tiny))
        gumbel = jax.random.gumbel(sub, q.shape)
        if d == 0 and not replacement:
            # Root children without replacement: the K largest perturbed log-probs, in order.
            _, x = jax.lax.top_k(logq[:, 0] + gumbel[:, 0], k)  # [B, K]
        else:
            x = jnp.argmax(logq + gumbel, axis=-1)  # [B, K]
        x = x.astype(jnp.int32)
        tokens.append(x)
        q_rows.append(q)
        p_rows.append(p)
        h = _hash(h, x)
    p_bonus, _ = node_probs(family, h, length)
    return Draft(
        jnp.stack(tokens, axis=2),
        jnp.stack(q_rows, axis=2),
        jnp.stack([*p_rows, p_bonus], axis=2),
    )
