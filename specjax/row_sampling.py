"""Per-row sampling parameters: each row of a batch processes its logits with its own
temperature, top-k and top-p (the requests of a continuous batch), as traced arrays, so one
compiled program serves every value.

:func:`row_probs` is :func:`specjax.sampling.probs_from_logits` with the parameters read per row:
the same operations in the same order, so a row gets the law (and the tokens) a static
:class:`~specjax.sampling.SamplingParams` of its values gives. A row at temperature 0 gets the
one-hot law at its first maximal logit, which every verifier accepts exactly as a greedy row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.typing import Array
from specjax.verify.common import argmax_first


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RowSampling:
    """Sampling parameters per row (traced: their values never cause a compile).

    Attributes:
      temperature: float32 ``[B]`` (0: the row is greedy).
      top_k: int32 ``[B]`` (0: off).
      top_p: float32 ``[B]`` (1: off).
    """

    temperature: Array
    top_k: Array
    top_p: Array

    @property
    def greedy(self) -> bool:
        """False: whether rows are greedy is known only at run time (the general path)."""
        return False

    @classmethod
    def of(cls, params: Sequence) -> RowSampling:
        """Host arrays ``[n]`` of ``params`` (a :class:`~specjax.sampling.SamplingParams` per
        row; not imported here: :mod:`specjax.sampling` imports this module)."""
        return cls(
            np.asarray([p.temperature for p in params], np.float32),
            np.asarray([p.top_k for p in params], np.int32),
            np.asarray([p.top_p for p in params], np.float32),
        )

    @classmethod
    def full(cls, params, batch: int) -> RowSampling:
        """``params`` for each of ``batch`` rows (device arrays ``[B]``)."""
        return cls(
            jnp.full((batch,), params.temperature, jnp.float32),
            jnp.full((batch,), params.top_k, jnp.int32),
            jnp.full((batch,), params.top_p, jnp.float32),
        )


def row_probs(logits: Array, rows: RowSampling) -> Array:
    """The processed law ``[B, ..., V]`` (float32) of ``logits [B, ..., V]``, row b with
    ``rows``' b-th values: temperature, then top-k, then top-p, as
    :func:`specjax.sampling.probs_from_logits` does for one static set."""
    logits = logits.astype(jnp.float32)
    vocab = logits.shape[-1]
    per_row = lambda x: x.reshape(x.shape + (1,) * (logits.ndim - 1))  # [B, 1, ..., 1]
    t, k, p = per_row(rows.temperature), per_row(rows.top_k), per_row(rows.top_p)
    # Shifted by the maximum first, as the static path (a tiny temperature cannot make NaN).
    shifted = logits - jnp.max(logits, axis=-1, keepdims=True)  # [B, ..., V], <= 0
    x = jnp.where(shifted == 0.0, 0.0, shifted / jnp.where(t > 0, t, 1.0))
    # Each filter sorts [B, ..., V], so it runs only when some row asks for it (a server's
    # requests rarely do; the sorts cost more than SmolLM2's step on a CPU).
    top_k = (k > 0) & (k < vocab)
    x = jax.lax.cond(jnp.any(top_k), lambda x: _top_k(x, k, top_k), lambda x: x, x)
    probs = jax.nn.softmax(x, axis=-1)
    probs = jax.lax.cond(jnp.any(p < 1.0), lambda q: _top_p(q, p), lambda q: q, probs)
    greedy = jax.nn.one_hot(argmax_first(logits), vocab, dtype=jnp.float32)
    return jnp.where(t == 0.0, greedy, probs)


def _top_k(x: Array, k: Array, on: Array) -> Array:
    """``x`` with the values below each row's k-th largest at -inf where ``on``. The k-th largest
    by a sort: k differs per row, so ``lax.top_k`` cannot take it."""
    descending = -jnp.sort(-x, axis=-1)
    kth = jnp.take_along_axis(descending, jnp.clip(k - 1, 0, x.shape[-1] - 1), axis=-1)
    return jnp.where(on & (x < kth), -jnp.inf, x)


def _top_p(probs: Array, p: Array) -> Array:
    """``probs`` cut to each row's nucleus of mass ``p`` and renormalised, where ``p < 1``."""
    ordered = -jnp.sort(-probs, axis=-1)  # descending
    mass_before = jnp.cumsum(ordered, axis=-1) - ordered
    keep = jnp.sum(mass_before < p, axis=-1, keepdims=True)  # >= 1
    threshold = jnp.take_along_axis(ordered, keep - 1, axis=-1)
    nucleus = jnp.where(probs >= threshold, probs, 0.0)
    nucleus = nucleus / jnp.sum(nucleus, axis=-1, keepdims=True)
    return jnp.where(p < 1.0, nucleus, probs)
