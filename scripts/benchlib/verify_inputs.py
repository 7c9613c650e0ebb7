"""``bench_verify.py``'s inputs: verifier calls, the read-once baseline, and random verifier
inputs cheap to make at large V."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from specjax import verify
from specjax.verify import common, synthetic

CHAIN = tuple(verify.CHAIN_VERIFIERS)  # greedy, token, block
MULTIPATH = tuple(verify.MULTIPATH_VERIFIERS)  # specinfer, spectr, gbv
TIMED_CHAIN = (*CHAIN, *verify.COUPLED_VERIFIERS)  # and gumbel, given noise for its key


def verifier_call(
    name: str, replacement: bool = True, package=verify
) -> Callable[..., common.VerifyResult]:
    """``(key, tokens, draft_probs, target_probs) -> result`` of verifier ``name`` (specinfer
    with or without ``replacement``; gumbel takes its noise for the key) from ``package``
    (another commit's ``specjax.verify``: :mod:`benchlib.verify_baseline`)."""
    fn = getattr(package, f"{name}_verify")
    if name == "specinfer":
        return lambda key, t, q, p: fn(key, t, q, p, replacement=replacement)
    return lambda key, t, q, p: fn(key, t, q, p)


@functools.cache
def jitted_verifier(name: str, replacement: bool) -> Callable[..., common.VerifyResult]:
    return jax.jit(verifier_call(name, replacement))


def read_once(draft_probs: jax.Array, target_probs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The baseline: one fused reduction over V of each input, results ``[B, (K,) L(+1)]``."""
    return jnp.sum(draft_probs, axis=-1), jnp.sum(target_probs, axis=-1)


@functools.partial(jax.jit, static_argnames=("batch", "num_paths", "length", "vocab", "bank"))
def timing_inputs(
    key: jax.Array, *, batch: int, num_paths: int, length: int, vocab: int, bank: int = 16
) -> synthetic.Draft:
    """Valid multi-path verifier inputs, cheap to make at large V.

    Each depth has a bank of ``bank`` draft rows q (softmax of 2 N(0, 1) logits) and target rows
    p (the same logits plus 0.9 N(0, 1)); a node uses bank row ``hash(prefix) % bank``, so paths
    sharing a prefix share their rows. Tokens are drawn from q by inverse CDF.

    Returns:
      A :class:`synthetic.Draft` with tokens ``[B, K, L]``, draft_probs ``[B, K, L, V]`` and
      target_probs ``[B, K, L+1, V]``.
    """
    k_q, k_p, k_u = jax.random.split(key, 3)
    logits = 2.0 * jax.random.normal(k_q, (length + 1, bank, vocab))
    q_bank = jax.nn.softmax(logits, axis=-1)  # [L+1, R, V]
    p_bank = jax.nn.softmax(logits + 0.9 * jax.random.normal(k_p, logits.shape), axis=-1)
    cdf_bank = jnp.cumsum(q_bank, axis=-1)
    u = jax.random.uniform(k_u, (length, batch, num_paths))  # [L, B, K]
    h = jnp.broadcast_to(jnp.arange(batch, dtype=jnp.uint32)[:, None], (batch, num_paths))
    rows, tokens = [], []
    for d in range(length + 1):
        row = (h % bank).astype(jnp.int32)  # [B, K]
        rows.append(row)
        if d == length:
            break
        cdf = cdf_bank[d][row]  # [B, K, V]
        x = jnp.sum(cdf < u[d][..., None] * cdf[..., -1:], axis=-1)
        x = jnp.minimum(x, vocab - 1).astype(jnp.int32)
        tokens.append(x)
        h = h * jnp.uint32(1000003) + x.astype(jnp.uint32) + jnp.uint32(1)
    row = jnp.stack(rows, axis=2)  # [B, K, L+1]
    depth = jnp.arange(length + 1)[None, None, :]
    return synthetic.Draft(
        jnp.stack(tokens, axis=2),
        q_bank[depth[..., :length], row[..., :length]],
        p_bank[depth, row],
    )


@jax.jit
def chain_noise(key: jax.Array, target_probs: jax.Array) -> jax.Array:
    """Gumbel noise ``[B, L+1, V]`` for ``gumbel``'s chain of target rows ``[B, L+1, V]``."""
    b, rows, v = target_probs.shape
    positions = jnp.broadcast_to(jnp.arange(rows), (b, rows))
    return verify.gumbel_noise(jax.random.split(key, b), positions, v)


@functools.partial(jax.jit, static_argnames=("num_paths",))
def first_paths(draft: synthetic.Draft, num_paths: int) -> synthetic.Draft:
    """The first K of i.i.d. paths are a valid K-path draft (copied to fresh arrays)."""
    return synthetic.Draft(*(x[:, :num_paths] for x in draft))


@jax.jit
def chain_of(draft: synthetic.Draft) -> synthetic.Draft:
    """Path 0 as a chain: tokens ``[B, L]``, draft_probs ``[B, L, V]``, target ``[B, L+1, V]``."""
    return synthetic.Draft(*(x[:, 0] for x in draft))
