"""A model draft's lazy prefill (``ModelDrafter.init(lazy=True)``, chosen by ``init_state`` when
the widths hold 0): the draft reads nothing until its first drafting step, and its catch-up there
leaves the cache a prefill would have left, a prompt longer than ``CATCH_UP_LONG`` included.
Greedy equality with autoregressive decoding under random widths (tests/test_widths.py) runs
through this path."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specjax import sampling
from specjax.decode import DecodeConfig
from specjax.decode.seams import prefill_program, prepare
from specjax.drafters import ModelDrafter
from specjax.drafters.base import near
from specjax.drafters.model import CATCH_UP_LONG
from specjax.models.pure import prefill
from specjax.testing import pair

GREEDY = sampling.SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def models():
    return pair(sigma=0.05, max_seq_len=512)


def test_catch_up_from_a_lazy_cache_equals_a_prefill(models):
    _, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    rng = np.random.default_rng(0)
    lengths = np.array([CATCH_UP_LONG + 45, 40, 1], np.int32)  # long chunks, short ones, none
    tokens = np.zeros((3, 400), np.int32)
    for r, n in enumerate(lengths):
        tokens[r, :n] = rng.integers(1, 48, n)
    lazy = drafter.init(tokens[:, :320], lengths, 400, lazy=True)
    assert np.all(np.asarray(lazy.lengths) == 0)
    cache = jax.jit(drafter.catch_up)(lazy, tokens, lengths)
    seen = np.asarray(cache.lengths)
    assert np.all(seen >= np.maximum(lengths - 2, 0)) and np.all(seen < np.maximum(lengths, 1))
    fresh = prefill(draft, tokens[:, :320], lengths, 400)
    for r in range(3):
        np.testing.assert_allclose(
            cache.k[:, r, : seen[r]], fresh.k[:, r, : seen[r]], atol=1e-5, rtol=1e-5
        )
        np.testing.assert_allclose(
            cache.v[:, r, : seen[r]], fresh.v[:, r, : seen[r]], atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("widths,lazy", [((0, 3), True), ((), False), ((2, 3), False)])
def test_the_draft_reads_the_prompt_only_where_a_step_may_skip_it(models, widths, lazy):
    """With width 0 among the widths the prefill leaves the draft cache empty (a generation
    that never drafts never runs the draft); otherwise the draft reads the prompt there."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, 8, widths=widths)
    prompts = [[1, 2, 3, 4, 5], [6, 7]]
    b = prepare(target, drafter, prompts, cfg)
    init = jax.jit(prefill_program, static_argnames=("capacity", "buffer", "widths"))
    args = (b.prompts, b.lengths, b.active, np.int32(0))
    state = init(target, drafter, *args, capacity=b.capacity, buffer=b.buffer, widths=widths)
    seen = np.asarray(state.draft_state.lengths)[:2]
    assert seen.tolist() == ([0, 0] if lazy else [4, 1])


def test_a_bounded_catch_up_equals_the_loop(models):
    """Without 0 among the widths the draft is at most L + 3 tokens behind, and its catch-up is
    one feed instead of a loop (``near``: no loop inside the step); from a cache that many
    behind it leaves exactly the cache the loop leaves."""
    _, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    assert near(drafter, (0, 3)).far_behind and near(drafter, (0, 3)) == drafter
    bounded = near(drafter, (2, 3))
    assert not bounded.far_behind and bounded == near(drafter, ())
    rng = np.random.default_rng(1)
    lengths = np.array([9, 20, 31, 5], np.int32)
    behind = np.array([1, 2, 4, 3 + 3], np.int32)  # up to L + 3
    tokens = rng.integers(1, 48, (4, 64)).astype(np.int32)
    cache = prefill(draft, tokens, lengths - behind + 1, 64)  # all but the last token of those
    assert np.asarray(cache.lengths).tolist() == (lengths - behind).tolist()
    want = jax.jit(drafter.catch_up)(cache, tokens, lengths)
    got = jax.jit(bounded.catch_up)(cache, tokens, lengths)
    assert np.all(lengths - np.asarray(got.lengths) <= 2)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(a, b)
