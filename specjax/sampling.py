"""Logits -> the processed distribution actually sampled from, and sampling from it.

Speculative decoding is exact only if the draft tokens were drawn from exactly the ``draft_probs``
handed to the verifier, and the verifier's ``target_probs`` are the target's law after the same
processing. Both sides therefore go through :func:`probs_from_logits` with one
:class:`SamplingParams`: temperature, then top-k, then top-p (nucleus). Temperature 0 means greedy:
a one-hot distribution at the first maximal logit.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax
import jax.numpy as jnp

from specjax.row_sampling import RowSampling, row_probs
from specjax.typing import Array, PRNGKey
from specjax.verify.common import argmax_first, sample_weights
from specjax.verify.gumbel import gumbel_max, gumbel_noise


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How logits become the distribution tokens are drawn from (static: one compile each).

    Attributes:
      temperature: 0 for greedy decoding, else logits are divided by it.
      top_k: keep the k most likely tokens (ties at the k-th value kept); 0 keeps all.
      top_p: keep the smallest set of most likely tokens whose mass reaches top_p; 1 keeps all.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{name} must be a number, got {value!r}")
        if not is_int(self.top_k):
            raise TypeError(f"top_k must be an int (0 = off), got {self.top_k!r}")
        if not 0.0 <= self.temperature < math.inf:
            raise ValueError(
                f"temperature must be >= 0 (0 = greedy) and finite, got {self.temperature}"
            )
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        """Whether this is temperature-0 (argmax) decoding."""
        return self.temperature == 0.0


def is_int(value) -> bool:
    """Whether ``value`` is an integer (Python or NumPy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def split_keys(keys: PRNGKey, num: int) -> tuple[PRNGKey, ...]:
    """``num`` independent key arrays ``[B]`` from per-row keys ``[B]`` (one split per row)."""
    split = jax.vmap(lambda k: jax.random.split(k, num))(keys)  # [B, num]
    return tuple(split[:, i] for i in range(num))


def row_keys(key: PRNGKey, batch: int) -> PRNGKey:
    """Per-row keys ``[B]``: row b draws from ``fold_in(key, b)``, whatever the other rows."""
    return jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(batch))


def probs_from_logits(logits: Array, params: SamplingParams | RowSampling) -> Array:
    """The processed distribution ``[..., V]`` (float32) for logits ``[..., V]``; with
    :class:`~specjax.row_sampling.RowSampling`, row b of ``logits [B, ..., V]`` takes row b's
    values (:func:`~specjax.row_sampling.row_probs`)."""
    if isinstance(params, RowSampling):
        return row_probs(logits, params)
    logits = logits.astype(jnp.float32)
    vocab = logits.shape[-1]
    if params.greedy:
        return jax.nn.one_hot(argmax_first(logits), vocab, dtype=jnp.float32)
    # Shift by the row maximum before dividing, so that a tiny temperature cannot overflow to
    # inf - inf = NaN: as the temperature -> 0 the law tends to uniform over the maximal logits,
    # and that is what it computes (the maximum maps to 0, the rest to large negatives or -inf).
    # (A subnormal temperature may flush to 0 on some backends: the maxima stay exactly 0.)
    shifted = logits - jnp.max(logits, axis=-1, keepdims=True)  # [..., V], <= 0
    x = jnp.where(shifted == 0.0, 0.0, shifted / params.temperature)
    if 0 < params.top_k < vocab:
        kth = jax.lax.top_k(x, params.top_k)[0][..., -1:]  # [..., 1]
        x = jnp.where(x < kth, -jnp.inf, x)
    probs = jax.nn.softmax(x, axis=-1)
    if params.top_p < 1.0:
        ordered = -jnp.sort(-probs, axis=-1)  # descending
        mass_before = jnp.cumsum(ordered, axis=-1) - ordered
        keep = jnp.sum(mass_before < params.top_p, axis=-1, keepdims=True)  # >= 1
        threshold = jnp.take_along_axis(ordered, keep - 1, axis=-1)
        probs = jnp.where(probs >= threshold, probs, 0.0)
        probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
    return probs


def sample(key: PRNGKey, probs: Array) -> Array:
    """One token per row of ``probs [..., V]`` (int32 ``[...]``); the index if rows are one-hot.

    Exact inverse-CDF sampling in two levels (two uniforms per row, one read of ``probs``;
    :func:`specjax.verify.common.sample_weights`) instead of V Gumbel draws per row.
    """
    rows = probs.reshape(-1, probs.shape[-1])
    return sample_weights(key, rows, rows).reshape(probs.shape[:-1])


def greedy_token(logits: Array) -> Array:
    """The first maximal index of ``logits [..., V]`` (int32 ``[...]``): what sampling
    ``probs_from_logits(logits, SamplingParams(0.0))`` returns, without building the one-hot."""
    return argmax_first(logits.astype(jnp.float32))


def position_tokens(
    noise_keys: PRNGKey, positions: Array, logits: Array, params: SamplingParams | RowSampling
) -> Array:
    """One token per row from the processed law of ``logits [B, V]``: the first maximal index at
    temperature 0, else the Gumbel-max draw of row b's noise at its token's position
    ``positions [B]`` (:func:`specjax.verify.gumbel_noise` of ``noise_keys [B]``): an exact
    sample that depends on the row's key and the position alone (int32 ``[B]``)."""
    if params.greedy:
        return greedy_token(logits)
    noise = race_weights(noise_keys, positions[:, None], logits.shape[-1], params)[:, 0]
    return gumbel_max(probs_from_logits(logits, params), noise)  # noise [B, V]


def race_weights(
    noise_keys: PRNGKey, positions: Array, vocab: int, params: SamplingParams | RowSampling
) -> Array:
    """float32 ``[B, T, V]``: the race weights of rows at ``positions [B, T]``
    (:func:`specjax.verify.gumbel_noise`) for laws processed with ``params``, or ones where every
    row is greedy: a greedy row's law is one-hot, whose race any positive weights leave to the
    same token, and V draws per position cost more than a small model's step on a CPU (per-row
    values decide on device whether some row samples)."""
    draw = lambda: gumbel_noise(noise_keys, positions, vocab)
    ones = lambda: jnp.ones((*positions.shape, vocab), jnp.float32)
    if params.greedy:
        return ones()
    if isinstance(params, RowSampling):
        return jax.lax.cond(jnp.any(params.temperature > 0), draw, ones)
    return draw()


def draw(
    keys: PRNGKey,
    probs: Array,
    positions: Array,
    coupled: bool,
    vocab: int | None = None,
    ids: Array | None = None,
) -> Array:
    """A drafter's tokens ``[B, K]`` (indices into the law) from ``probs [B, K, W]``: with
    per-row step keys ``[B]`` (one independent draw per path: :func:`sample`), or ``coupled``:
    the Gumbel-max draw of the rows' noise keys at the tokens' ``positions [B]``
    (:func:`position_tokens`), the noise the target's token at that position is drawn with (the
    ``gumbel`` verifier). A law over a draft vocabulary (``ids [W]``: its target ids, of
    ``vocab`` V) reads the noise of those ids: the draw of the law scattered into V."""
    if not coupled:
        return jax.vmap(sample)(keys, probs)
    noise = gumbel_noise(keys, positions[:, None], vocab or probs.shape[-1])  # [B, 1, V]
    return gumbel_max(probs, noise if ids is None else noise[..., ids])


def sample_without_replacement(key: PRNGKey, probs: Array, count: int) -> tuple[Array, Array]:
    """``count`` distinct tokens drawn one after another without replacement (Gumbel top-k).

    Args:
      key: PRNG key.
      probs: ``[..., V]``.
      count: K, the number of draws.

    Returns:
      ``(tokens [..., K] int32, valid [..., K] bool)``: tokens in draw order; ``valid`` is False
      for draws past the support of ``probs`` (fewer than K tokens have mass).
    """
    gumbel = jax.random.gumbel(key, probs.shape, jnp.float32)
    perturbed = jnp.log(probs) + gumbel
    values, tokens = jax.lax.top_k(perturbed, count)
    return tokens.astype(jnp.int32), values > -jnp.inf


def saguaro(probs: Array, top: int, factor: float) -> Array:
    """Saguaro sampling's law q' ``[..., V]``: the ``top`` most likely tokens' probabilities
    scaled by ``factor`` (0 < factor <= 1), renormalised.

    Drafting from q' pushes the residual max(p - q', 0) onto the draft's favourite tokens, which
    is where an SSD cache guesses the bonus token; verification stays exact as long as the
    verifier receives q' itself (SSD records it as the draft law). Ties at the ``top``-th
    probability are all scaled; one-hot rows are unchanged.
    """
    if factor == 1.0 or top < 1:
        return probs
    kth = jax.lax.top_k(probs, top)[0][..., -1:]  # [..., 1]
    scaled = jnp.where((probs >= kth) & (probs > 0), probs * factor, probs)
    return scaled / jnp.sum(scaled, axis=-1, keepdims=True)
