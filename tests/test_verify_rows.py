"""Verifier keys: raw and typed keys agree, and one key per batch row gives each row what
verifying it alone with its key gives, so the decode step verifies the whole batch in one call."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verify
from tests.test_verify_api import CHAIN, MULTI, as_tuple, make_draft, multipath


@pytest.mark.parametrize(
    "name",  # one per way of drawing: token.py, block_uniforms (block, gbv), tree_walk
    [
        n if n in ("token", "gbv", "spectr") else pytest.param(n, marks=pytest.mark.slow)
        for n in CHAIN + MULTI
    ],
)
def test_per_row_keys_give_each_row_what_verifying_it_alone_gives(name):
    """One key per row (typed ``[B]`` or raw ``uint32[B, 2]``): one batched call equals B
    batch-of-one calls with those keys, bit for bit, so decoding verifies the whole batch at
    once with the outputs a row-by-row loop gave; ``num_draft`` varies per row."""
    d = make_draft(5, b=5)
    f = (
        (lambda *a, **kw: verify.get(name)(*a[:1], *(x[:, 0] for x in a[1:]), **kw))
        if (name in CHAIN)
        else multipath(name)
    )
    n = jnp.asarray(np.random.default_rng(0).integers(0, 5, size=(5, 3)), jnp.int32)
    n = n[:, 0] if name in CHAIN else n
    args = (d.tokens, d.draft_probs, d.target_probs)
    typed, raw = jax.random.split(jax.random.key(7), 5), jax.random.split(jax.random.PRNGKey(7), 5)
    for keys in (typed, raw) if name == "token" else (typed,):
        batched = as_tuple(jax.jit(f)(keys, *args, num_draft=n))
        one = jax.jit(lambda k, *xs, m: f(k, *xs, num_draft=m))
        alone = [
            as_tuple(one(keys[b], *(x[b : b + 1] for x in args), m=n[b : b + 1])) for b in range(5)
        ]
        for i, field in enumerate(batched):
            np.testing.assert_array_equal(field, [a[i][0] for a in alone], err_msg=name)
    if name != "greedy":  # (greedy draws nothing)
        with pytest.raises(ValueError, match=r"per-row keys must be \[B\] = \[5\]"):
            f(jax.random.split(jax.random.key(7), 4), *args, num_draft=n)


@pytest.mark.parametrize("name", CHAIN + MULTI)
def test_raw_and_typed_keys_agree(name):
    d = make_draft(5)
    f = verify.get(name) if name in CHAIN else multipath(name)
    args = (
        (d.tokens[:, 0], d.draft_probs[:, 0], d.target_probs[:, 0])
        if name in CHAIN
        else (d.tokens, d.draft_probs, d.target_probs)
    )
    typed = jax.random.key(11)
    raw = jax.random.key_data(typed)
    assert raw.dtype == jnp.uint32 and raw.shape == (2,)
    for a, b in zip(as_tuple(f(typed, *args)), as_tuple(f(raw, *args)), strict=True):
        np.testing.assert_array_equal(a, b)
