"""A draft law that is not a probability vector (a NaN, an infinity or a negative entry) ends
its path there in every verifier: the results equal, bit for bit, those of the draft cut at that
position (:func:`specjax.verify.common.sanitize_draft`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verify
from tests.test_verify_api import CHAIN, MULTI, as_tuple, make_draft, multipath


def poison(row: np.ndarray, kind: str, token: int) -> np.ndarray:
    """A law that is not a probability vector: all NaN, +inf or a negative entry at the drafted
    token (where each verifier reads it), the rest left as it was."""
    row = row.copy()
    if kind == "nan":
        row[:] = np.nan
    else:
        row[token] = np.inf if kind == "inf" else -0.25
    return row


def gumbel(key, tokens, draft_probs, target_probs, *, num_draft):
    """``gumbel_verify`` with the noise of ``key`` in place of the key (positions 0 .. L)."""
    b, l, v = draft_probs.shape
    positions = jnp.broadcast_to(jnp.arange(l + 1), (b, l + 1))
    noise = verify.gumbel_noise(jax.random.split(key, b), positions, v)
    return verify.gumbel_verify(noise, tokens, draft_probs, target_probs, num_draft=num_draft)


@pytest.mark.parametrize("name", [*CHAIN, "gumbel", *MULTI])
def test_invalid_draft_law_ends_the_draft(name):
    """A draft law with a NaN, an infinity or a negative entry ends its path there: for every
    key the verifier's result equals, bit for bit, its result on the draft cut at that
    position with its true laws (so the output law is the cut draft's: the target's). Bad laws
    sit at tree nodes: every path through the node carries the bad row."""
    b, k, l = 24, 3, 4
    d = make_draft(14, b=b, k=k, l=l)
    tokens = np.asarray(d.tokens)
    cut = np.random.default_rng(3).integers(0, l + 1, size=(b, k))  # l: no bad law
    chosen = np.arange(l)[None, None] == cut[..., None]  # [B, K, L]
    same_prefix = np.stack(
        [(tokens[:, :, None, :i] == tokens[:, None, :, :i]).all(-1) for i in range(l)], -1
    )  # [B, K, K, L]: paths k and k' share the node whose children are at depth i
    bad = (same_prefix & chosen[:, None, :, :]).any(2)  # [B, K, L]
    first = np.where(bad.any(-1), bad.argmax(-1), l)
    assert 0 < (first < l).mean() < 1 and (first[first < l] > 0).any()
    chain = name in CHAIN or name == "gumbel"
    f = jax.jit(gumbel if name == "gumbel" else verify.get(name) if chain else multipath(name))
    pick = (lambda x: x[:, 0]) if chain else (lambda x: x)
    full = jnp.full(pick(first).shape, l, jnp.int32)
    want = [
        f(
            jax.random.key(s),
            pick(d.tokens),
            pick(d.draft_probs),
            pick(d.target_probs),
            num_draft=jnp.asarray(pick(first), jnp.int32),
        )
        for s in range(3)
    ]
    for kind in ("nan", "inf", "negative"):
        probs = np.asarray(d.draft_probs).copy()
        for i, j, m in zip(*np.nonzero(bad), strict=True):
            probs[i, j, m] = poison(probs[i, j, m], kind, tokens[i, j, m])
        probs = pick(jnp.asarray(probs))
        for s in range(3):
            got = f(jax.random.key(s), pick(d.tokens), probs, pick(d.target_probs), num_draft=full)
            for a, c in zip(as_tuple(got), as_tuple(want[s]), strict=True):
                np.testing.assert_array_equal(a, c, err_msg=f"{name} {kind} key {s}")


def test_greedy_rule_is_greedy_verify_after_the_law_check():
    """``greedy_rule`` (what ``bench_verify.py --parts=greedy`` times without the law check) is
    greedy verification itself: on clean laws it gives ``greedy_verify``'s result, and with a
    bad law it gives that result once handed the check's cut lengths."""
    from specjax.verify import common, greedy

    b, l = 24, 4
    d = make_draft(15, b=b, k=1, l=l)
    tokens, q, p = d.tokens[:, 0], np.array(d.draft_probs[:, 0]), d.target_probs[:, 0]
    key = jax.random.key(0)
    same = lambda x, y: all(np.array_equal(a, c) for a, c in zip(x, y, strict=True))
    want = as_tuple(greedy.greedy_verify(key, tokens, jnp.asarray(q), p))
    assert same(want, as_tuple(greedy.greedy_rule(tokens, None, p)))
    q[::2, 0] = np.nan  # rows 0, 2, ... draft nothing valid
    _, cut = common.sanitize_draft(jnp.asarray(q), None)
    got = as_tuple(greedy.greedy_rule(tokens, cut, p))
    assert same(got, as_tuple(greedy.greedy_verify(key, tokens, jnp.asarray(q), p)))
    assert np.all(got[0][::2] == 0) and np.any(want[0][::2] > 0)
