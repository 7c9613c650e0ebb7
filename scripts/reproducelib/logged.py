"""Target and draft distributions logged on real decoded text: the inputs of the multi-draft
claims (:mod:`reproducelib.multidraft`) and of GBV's single-step analysis (:mod:`.gbv`).

The target decodes the prompts autoregressively at temperature 1 (:func:`specjax.decode.generate`);
then the target and the draft read the prompt plus the generated text in one forward each, and
at every generated position the next-token laws p(. | text so far) and q(. | text so far) are
kept (temperature 1: the softmax of the logits). A feature draft head reads the target's hidden
states of the same forward, teacher-forced: at every position it sees the target's features of
the text so far, exactly as when it drafts the first token of a block there (its law scattered
into the V-vector, zeros outside its draft vocabulary, as :class:`~specjax.drafters.FeatureDrafter`
reports it).

Tokens that the draft gives probability 0 at every logged position (those outside a head's draft
vocabulary) are merged into one column holding their summed p: every single-step rate and α*
depends on such tokens only through that sum (they are never drafted; the residuals keep p's
mass there), so the rates are unchanged and the V = 49152 rows shrink to W + 1 columns.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from reproducelib.pairs import Pair
from specjax.decode import DecodeConfig, generate
from specjax.decode.step import feature_layers
from specjax.models.cache import KVCache
from specjax.sampling import SamplingParams, probs_from_logits

PARAMS = SamplingParams(1.0)


@dataclasses.dataclass(frozen=True)
class Logged:
    """``p``, ``q``: float64 ``[N, V']`` target and draft laws at N positions of decoded text
    (V' = V, or fewer columns after :func:`lump_undrafted`); ``vocab``: the pair's V."""

    p: np.ndarray
    q: np.ndarray
    pair: str
    tokens: int
    vocab: int

    @property
    def size(self) -> int:
        return self.p.shape[0]


def lump_undrafted(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(p, q) [N, V]`` with the columns where q is 0 in every row merged into one last column
    (their summed p, q = 0); unchanged when there are none."""
    drafted = np.any(q > 0, axis=0)
    if drafted.all():
        return p, q
    rest = p[:, ~drafted].sum(axis=1, keepdims=True)
    return (
        np.concatenate([p[:, drafted], rest], axis=1),
        np.concatenate([q[:, drafted], np.zeros_like(rest)], axis=1),
    )


def _head_laws(target, drafter, tokens):
    """``(p, q) [B, T, V]``: the target's laws and the draft head's, teacher-forced on the
    target's features of the same forward (pair t holds g_{t-1}: zero at t = 0)."""
    logits, _, hidden = target(tokens, features=feature_layers(drafter))  # hidden [B, T, A, D]
    head = drafter.head.module
    b, t = tokens.shape
    g = jnp.concatenate([jnp.zeros_like(hidden[:, :1]), hidden[:, :-1]], axis=1)
    _, head_logits, _ = head(head.fuse(g), tokens, cache=KVCache.init(head.config, b, t))
    q_w = probs_from_logits(head_logits, PARAMS)  # [B, T, W]
    q = jnp.zeros((b, t, drafter.vocab_size), jnp.float32).at[..., head.d2t[...]].set(q_w)
    return probs_from_logits(logits, PARAMS), q


@jax.jit
def _laws(target, drafter, tokens):
    if feature_layers(drafter):
        return _head_laws(target, drafter, tokens)
    draft_logits = drafter.model(tokens).logits  # a model drafter
    return probs_from_logits(target(tokens).logits, PARAMS), probs_from_logits(draft_logits, PARAMS)


def log_distributions(pair: Pair, positions: int, seed: int = 0) -> Logged:
    """At least ``positions`` (p, q) pairs: every prompt decoded for ``positions / rows``
    tokens (rounded up), the laws kept at each generated position, the first ``positions``."""
    rows = len(pair.prompts)
    new = -(-positions // rows)
    gen = generate(
        pair.target,
        pair.prompts,
        DecodeConfig("autoregressive", PARAMS, new),
        seed=seed,
    )
    texts = [prompt + out for prompt, out in zip(pair.prompts, gen.tokens, strict=True)]
    width = max(map(len, texts))
    batch = np.zeros((rows, width), np.int32)  # right-padded: causal, so padding reads nothing
    for i, text in enumerate(texts):
        batch[i, : len(text)] = text
    drafter = pair.make_drafter(PARAMS, 1, 1)
    p_all, q_all = jax.device_get(_laws(pair.target, drafter, batch))
    ps, qs = [], []
    for i, (prompt, out) in enumerate(zip(pair.prompts, gen.tokens, strict=True)):
        start = len(prompt) - 1  # the law of the first generated token
        ps.append(p_all[i, start : start + len(out)])
        qs.append(q_all[i, start : start + len(out)])
    p = np.concatenate(ps)[:positions].astype(np.float64)
    q = np.concatenate(qs)[:positions].astype(np.float64)
    p /= p.sum(axis=1, keepdims=True)
    q /= q.sum(axis=1, keepdims=True)
    vocab = p.shape[1]
    p, q = lump_undrafted(p, q)
    return Logged(p, q, pair.name, int(sum(len(o) for o in gen.tokens)), vocab)
