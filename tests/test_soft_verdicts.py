"""The width controller's soft verdicts: a chain step under chosen widths reports Σ min(p, q)
per proposed position (the probability token verification accepts there), and the controller
averages it instead of the 0/1 verdicts; at temperature 0 it is the verdict itself."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import DecodeConfig, generate
from specjax.decode import widths as W
from specjax.decode.step import tree_laws, verify_tree
from specjax.drafters import ModelDrafter
from specjax.drafters.base import Draft
from specjax.sampling import SamplingParams
from tests.test_decode_lossless import NEW, PROMPT, ROWS, chi_square_pvalue, exact_joint
from tests.test_decode_lossless import pair as lossless_pair  # noqa: F401 (a fixture)

B, L, V = 4, 3, 9


def chain(seed: int, num_draft) -> tuple[Draft, jax.Array]:
    k_q, k_t, k_p = jax.random.split(jax.random.key(seed), 3)
    q = jax.nn.softmax(2.0 * jax.random.normal(k_q, (B, 1, L, V)), -1)  # [B, 1, L, V]
    tokens = jax.random.categorical(k_t, jnp.log(q)).astype(jnp.int32)  # [B, 1, L]
    num_draft = jnp.asarray(num_draft, jnp.int32)[:, None]  # [B, 1]
    tokens = jnp.where(jnp.arange(L) < num_draft[..., None], tokens, -1)
    logits = 2.0 * jax.random.normal(k_p, (B, 1 + L, V))  # the chain's tree forward
    return Draft(tokens, q, num_draft), logits


def test_a_chain_step_reports_the_overlap_of_its_laws():
    draft, logits = chain(0, [3, 2, 0, 1])
    keys = jax.random.split(jax.random.key(1), B)
    config = DecodeConfig("token", SamplingParams(1.0), 8, widths=(0, L))
    assert config.soft_verdicts
    _, num_draft, overlap = verify_tree(config, keys, draft, logits)
    p = tree_laws(config, logits, 1, L)[:, 0, :L]  # [B, L, V]
    want = np.minimum(np.asarray(p), np.asarray(draft.probs[:, 0])).sum(-1)
    proposed = np.arange(L)[None] < np.asarray(num_draft)
    np.testing.assert_allclose(np.asarray(overlap)[proposed], want[proposed], rtol=1e-6)
    assert np.all(np.asarray(overlap)[~proposed] == -1.0)
    for fixed in (
        DecodeConfig("token", SamplingParams(1.0), 8),  # no widths to choose
        DecodeConfig("greedy", SamplingParams(0.0), 8, widths=(0, L)),  # not its acceptance
    ):
        assert not fixed.soft_verdicts and verify_tree(fixed, keys, draft, logits)[2] is None


def test_the_controller_averages_the_overlap_and_at_temperature_zero_it_is_the_verdict():
    """At temperature 0 the laws are one-hot: the overlap at each proposed position is the
    verdict, and observing it leaves the controller as the 0/1 verdicts would. A soft overlap
    moves every seen position towards it (a first verdict replaces the prior), not towards
    its 0/1 verdict; the verdicts still decide which positions were seen."""
    policy = W.Goodput()
    control = W.init_control(B, L, (0, L), jax.random.key(0))
    active = jnp.ones((B,), bool)
    tau, proposed = jnp.asarray([0, 1, 3, 2]), jnp.full((B,), L)
    verdicts = (jnp.arange(L)[None] < tau[:, None]).astype(jnp.float32)  # one-hot laws' overlap
    hard = policy.observe(control, jnp.int32(1), active, tau, proposed, None)
    same = policy.observe(control, jnp.int32(1), active, tau, proposed, verdicts)
    plain = lambda c: [
        x for x in jax.tree.leaves(c) if not jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
    ]
    for a, b in zip(plain(hard), plain(same), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    soft = jnp.full((B, L), 0.6)
    got = policy.observe(control, jnp.int32(1), active, tau, proposed, soft)
    seen = np.arange(L)[None] <= np.asarray(tau)[:, None]
    start = np.asarray(control.accept)
    moved = np.asarray(got.accept)
    np.testing.assert_allclose(moved[seen], 0.6, rtol=1e-6)
    np.testing.assert_array_equal(moved[~seen], start[~seen])
    assert not np.allclose(np.asarray(hard.accept)[seen], 0.6)  # (the verdicts differ)
    np.testing.assert_array_equal(np.asarray(got.seen), np.asarray(hard.seen))
    # A later soft verdict is averaged in (weight 1 / 2), not copied.
    again = policy.observe(got, jnp.int32(1), active, tau, proposed, jnp.full((B, L), 0.2))
    np.testing.assert_allclose(np.asarray(again.accept)[seen], 0.4, rtol=1e-6)


@pytest.mark.slow  # 20,000 rows of Monte-Carlo
def test_sequence_law_at_temperature_one_with_the_controller_on_soft_verdicts(lossless_pair):  # noqa: F811
    """The controller reads the laws of the steps before (soft verdicts) to choose the next
    width: the sequences keep the target's law. (At T = 1 the block verifier's costs are
    guessed, never measured.)"""
    target, draft = lossless_pair
    params = SamplingParams(1.0)
    cfg = DecodeConfig("block", params, NEW, widths=(0, 2))
    assert cfg.soft_verdicts
    drafter = ModelDrafter(draft, num_paths=1, draft_len=2, sampling=params)
    out = generate(target, [PROMPT] * ROWS, cfg, drafter, seed=9)
    assert out.metrics.accepted_tokens > 0.1 * ROWS
    assert chi_square_pvalue(out.tokens, exact_joint(target, params)) > 1e-3
