"""Target and draft distributions logged on real decoded text: the inputs of the multi-draft
claims (:mod:`reproducelib.multidraft`) and of GBV's single-step analysis (:mod:`.gbv`).

The target decodes the prompts autoregressively at temperature 1 (:func:`specjax.decode.generate`);
then the target and the draft read the prompt plus the generated text in one forward each, and
at every generated position the next-token laws p(. | text so far) and q(. | text so far) are
kept (temperature 1: the softmax of the logits).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from reproducelib.pairs import Pair
from specjax.decode import DecodeConfig, generate
from specjax.sampling import SamplingParams, probs_from_logits


@dataclasses.dataclass(frozen=True)
class Logged:
    """``p``, ``q``: float64 ``[N, V]`` target and draft laws at N positions of decoded text."""

    p: np.ndarray
    q: np.ndarray
    pair: str
    tokens: int

    @property
    def size(self) -> int:
        return self.p.shape[0]


@jax.jit
def _laws(target, draft, tokens):
    params = SamplingParams(1.0)
    return (
        probs_from_logits(target(tokens), params),
        probs_from_logits(draft(tokens), params),
    )


def log_distributions(pair: Pair, positions: int, seed: int = 0) -> Logged:
    """At least ``positions`` (p, q) pairs: every prompt decoded for ``positions / rows``
    tokens (rounded up), the laws kept at each generated position, the first ``positions``."""
    rows = len(pair.prompts)
    new = -(-positions // rows)
    gen = generate(
        pair.target,
        pair.prompts,
        DecodeConfig("autoregressive", SamplingParams(1.0), new),
        seed=seed,
    )
    texts = [prompt + out for prompt, out in zip(pair.prompts, gen.tokens, strict=True)]
    width = max(map(len, texts))
    batch = np.zeros((rows, width), np.int32)  # right-padded: causal, so padding reads nothing
    for i, text in enumerate(texts):
        batch[i, : len(text)] = text
    p_all, q_all = (np.asarray(x, np.float64) for x in _laws(pair.target, pair.draft, batch))
    ps, qs = [], []
    for i, (prompt, out) in enumerate(zip(pair.prompts, gen.tokens, strict=True)):
        start = len(prompt) - 1  # the law of the first generated token
        ps.append(p_all[i, start : start + len(out)])
        qs.append(q_all[i, start : start + len(out)])
    p, q = np.concatenate(ps)[:positions], np.concatenate(qs)[:positions]
    p /= p.sum(axis=1, keepdims=True)
    q /= q.sum(axis=1, keepdims=True)
    return Logged(p, q, pair.name, int(sum(len(o) for o in gen.tokens)))
