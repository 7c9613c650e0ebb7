"""A drafter's law is the law it drew from, checked on the drafter alone (default tier).

The verifiers are exact only if ``Draft.probs`` is literally the law each draft token was sampled
from. Here one compiled ``propose`` at temperature 1 drafts many rows of one prompt on a V = 4
pair (tests/test_decode_lossless.py), and a chi-square test compares the drawn tokens with the
laws reported beside them: depth 0 against the (shared) root law, depth 1 given each depth-0
token against the law reported for it. The same test rejects a drafter that reports a law other
than the one it drew from (uniform laws; a feature head's law renormalised over V instead of
scattered from its draft vocabulary). Also: Gumbel top-k without replacement draws ordered
tuples with the Plackett-Luce law SpecInfer's without-replacement drafts assume.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from specjax import sampling
from specjax.decode import DecodeConfig
from specjax.decode.seams import prefill_program, prepare, split_keys
from specjax.drafters import ModelDrafter
from specjax.drafters.feature import FeatureDrafter
from tests.test_decode_lossless import PROMPT, LyingDrafter, V, pair  # noqa: F401
from tests.test_feature_drafter import RenormalisingDrafter, published_head, random_head

ROWS = 6_000
T1 = sampling.SamplingParams(temperature=1.0)


def drafted(target, drafter, rows: int = ROWS, seed: int = 3):
    """``(tokens [B, K, L], probs [B, K, L, V])`` of one ``propose`` after prefill of ``rows``
    copies of PROMPT."""
    cfg = DecodeConfig("block" if drafter.num_paths == 1 else "specinfer", T1, 4)
    b = prepare(target, drafter, [PROMPT] * rows, cfg)
    init = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
    state = init(target, drafter, b.prompts, b.lengths, b.active, np.int32(seed),
                 capacity=b.capacity, buffer=b.buffer)  # fmt: skip

    @jax.jit
    def propose(drafter, state):
        _, k_draft, _ = split_keys(state.keys, 3)  # the keys a speculative step drafts with
        return drafter.propose(state.draft_state, k_draft, state.tokens, state.lengths)[0]

    draft = propose(drafter, state)  # rows past ``rows`` pad the batch to its bucket
    return np.asarray(draft.tokens)[:rows], np.asarray(draft.probs, np.float64)[:rows]


def _statistic(counts: np.ndarray, law: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom of ``counts [V]`` against ``law [V]``, cells
    expected below 5 pooled; a count where the law has no mass makes the statistic infinite."""
    expected = law * counts.sum()
    if np.any((counts > 0) & (expected == 0)):
        return np.inf, 1
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return float(np.sum((obs - exp) ** 2 / exp)), len(exp) - 1


def law_pvalue(tokens: np.ndarray, probs: np.ndarray) -> float:
    """p-value that the depth-0 and depth-1 tokens of every path were drawn from the laws
    reported beside them (rows of one prompt: depth 0 shares one law, depth 1 one per depth-0
    token)."""
    t = tokens.reshape(-1, tokens.shape[-1])  # [B * K, L]
    q = probs.reshape(-1, *probs.shape[-2:])  # [B * K, L, V]
    groups = [(np.ones(len(t), bool), 0)]
    groups += [(t[:, 0] == a, 1) for a in range(V)]
    total, dof = 0.0, 0
    for rows, depth in groups:
        if not rows.any():
            continue
        law = q[rows, depth]
        # One prompt: a group's rows report one law (up to float rounding), the expectation.
        np.testing.assert_allclose(law, np.broadcast_to(law[0], law.shape), atol=1e-5)
        counts = np.bincount(t[rows, depth], minlength=V).astype(float)
        stat, d = _statistic(counts, law.mean(0))
        total, dof = total + stat, dof + d
    return float(stats.chi2.sf(total, dof))


@pytest.mark.parametrize(
    "kind,k,honest",
    [
        ("model", 1, True),
        ("model", 3, True),
        ("feature", 1, True),
        ("feature", 3, True),
        ("published", 3, True),  # a head read from the speculators layout, every switch on
        ("model", 1, False),  # LyingDrafter: uniform laws reported
        ("feature", 1, False),  # RenormalisingDrafter: the law over V, not the scattered one
    ],
)
def test_a_drafters_law_is_the_law_it_drew_from(pair, kind, k, honest, tmp_path):  # noqa: F811
    target, draft = pair
    if kind == "model":
        cls = ModelDrafter if honest else LyingDrafter
        drafter = cls(draft, num_paths=k, draft_len=2, sampling=T1)
    elif kind == "published":
        head = published_head(target, 3, tmp_path / "head", seed=5)
        drafter = FeatureDrafter(head, num_paths=k, draft_len=2, sampling=T1)
    else:
        cls = FeatureDrafter if honest else RenormalisingDrafter
        drafter = cls(random_head(target, 3, seed=5), num_paths=k, draft_len=2, sampling=T1)
    tokens, probs = drafted(target, drafter)
    assert tokens.shape == (ROWS, k, 2) and probs.shape == (ROWS, k, 2, V)
    assert len(np.unique(tokens[:, :, 0])) > 1  # real draws, not one token
    p = law_pvalue(tokens, probs)
    assert p > 1e-3 if honest else p < 1e-6, p


def plackett_luce(q: np.ndarray, count: int) -> dict[tuple[int, ...], float]:
    """Probability of each ordered tuple of ``count`` distinct tokens drawn one after another
    without replacement from ``q``."""
    law = {}
    for seq in itertools.permutations(range(len(q)), count):
        p, left = 1.0, 1.0
        for token in seq:
            p *= q[token] / left if left > 0 else 0.0
            left -= q[token]
        law[seq] = p
    return law


@pytest.mark.parametrize("count", [2, 3])
def test_sampling_without_replacement_draws_the_plackett_luce_law(count):
    q = np.array([0.1, 0.2, 0.3, 0.4])
    n = 60_000
    draw = jax.jit(lambda key: sampling.sample_without_replacement(key, jnp.asarray(q), count))
    tokens, valid = jax.vmap(draw)(jax.random.split(jax.random.key(1), n))
    tokens, valid = np.asarray(tokens), np.asarray(valid)
    assert valid.all() and all(len(set(row)) == count for row in tokens[:100])
    law = plackett_luce(q, count)
    cells = list(law)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.bincount([index[tuple(row)] for row in tokens], minlength=len(cells))
    stat, dof = _statistic(counts.astype(float), np.array([law[c] for c in cells]))
    assert stats.chi2.sf(stat, dof) > 1e-3
    # The law it must not be: i.i.d. draws with replacement, conditioned on being distinct.
    iid = np.array([np.prod(q[list(c)]) for c in cells])
    stat, dof = _statistic(counts.astype(float), iid / iid.sum())
    assert stats.chi2.sf(stat, dof) < 1e-6


def test_sampling_without_replacement_marks_draws_past_the_support():
    tokens, valid = sampling.sample_without_replacement(
        jax.random.key(0), jnp.array([0.0, 0.7, 0.0, 0.3]), 3
    )
    assert sorted(np.asarray(tokens)[:2].tolist()) == [1, 3]
    assert np.asarray(valid).tolist() == [True, True, False]
