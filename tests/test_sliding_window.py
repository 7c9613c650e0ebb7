"""Sliding-window layers: a token sees itself and the W - 1 positions before its own, counted
from its own position, in every way the decoder is called: a draft tree scored in one call, a
tree grown level by level over several calls (the drafters'), and chunked attention.

The reference is the model's own full forward without a cache over the prefix and one path of
the tree, a plain causal sequence whose window nothing else decides."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import tree
from specjax.models import Decoder, KVCache, attention
from specjax.models.config import tiny

# A window shorter than the tree's depth: deeper nodes must see less of the prefix.
WINDOW = 3
PREFIX = 9
K, L = 2, 4


def sliding_model(**overrides):
    config = tiny(
        vocab_size=50,
        num_layers=3,
        sliding_window=WINDOW,
        layer_types=("sliding", "full", "sliding"),
        **overrides,
    )
    return Decoder(config, rngs=nnx.Rngs(0))


def reference(model, prefix, path):
    """``[L, V]``: logits of each node of ``path`` from a plain causal forward."""
    seq = jnp.asarray([list(prefix) + list(path)], jnp.int32)
    return np.asarray(model(seq).logits)[0, len(prefix) - 1 : len(prefix) + len(path) - 1]


def draft_tokens():
    rng = np.random.default_rng(0)
    return rng.integers(0, 50, PREFIX), rng.integers(0, 50, (K, L))


@pytest.mark.parametrize("chunk", [0, 4])
def test_a_tree_scored_in_one_call_sees_windows_from_each_node(chunk, monkeypatch):
    monkeypatch.setattr(attention, "CHUNK", chunk)
    model = sliding_model()
    prefix, paths = draft_tokens()
    cache = KVCache.init(model.config, 1, 64)
    _, cache, _ = model(jnp.asarray([prefix[:-1]]), cache=cache)
    # the root (last prefix token) then the paths in path-major order, as the target scores them
    tokens = np.concatenate([[prefix[-1]], paths[:, :-1].reshape(-1)])
    depths = tree.tree_depths(K, L - 1)
    logits, _, _ = model(
        jnp.asarray([tokens]),
        cache=cache,
        positions=jnp.asarray([PREFIX - 1 + depths]),
        attn_mask=jnp.asarray(tree.tree_mask(K, L - 1))[None],
    )
    nodes = tree.node_index(K, L - 1)  # [K, L]: the root, then each path's nodes
    for k in range(K):
        want = reference(model, prefix, paths[k])
        np.testing.assert_allclose(np.asarray(logits)[0, nodes[k]], want, atol=2e-5, rtol=2e-5)


def test_a_tree_grown_level_by_level_sees_windows_from_each_node():
    """The drafters' way: the root, then one call per depth feeding the K paths' tokens at
    ``lengths + depth - 1`` with :func:`specjax.tree.draft_kv_mask`."""
    model = sliding_model()
    prefix, paths = draft_tokens()
    cache = KVCache.init(model.config, 1, 64)
    logits, cache, _ = model(jnp.asarray([prefix]), cache=cache)
    got = np.zeros((K, L, 50), np.float32)
    got[:, 0] = np.asarray(logits)[0, -1]
    lengths = jnp.asarray([PREFIX], jnp.int32)
    for depth in range(1, L):
        kv_mask = tree.draft_kv_mask(lengths, jnp.int32(depth), K)
        positions = jnp.full((1, K), PREFIX + depth - 1)
        logits, cache, _ = model(
            jnp.asarray(paths[None, :, depth - 1]),
            cache=cache,
            positions=positions,
            kv_mask=kv_mask,
        )
        got[:, depth] = np.asarray(logits)[0]
    for k in range(K):
        np.testing.assert_allclose(got[k], reference(model, prefix, paths[k]), atol=2e-5, rtol=2e-5)


def test_the_window_changes_what_a_node_sees():
    """The reference itself depends on the window (a window of the whole sequence gives other
    logits), so the tests above could not pass with the window ignored."""
    prefix, paths = draft_tokens()
    narrow = reference(sliding_model(), prefix, paths[0])
    model = sliding_model()
    wide = Decoder(
        tiny(vocab_size=50, num_layers=3, sliding_window=64, layer_types=("sliding",) * 3),
        rngs=nnx.Rngs(0),
    )
    nnx.update(wide, nnx.state(model))
    assert np.abs(narrow - reference(wide, prefix, paths[0])).max() > 1e-2


def test_slot_distances_count_from_each_token():
    lengths = jnp.asarray([4, 0], jnp.int32)
    positions = jnp.asarray([[4, 5, 5], [0, 1, 1]], jnp.int32)  # a root and two children
    dist = np.asarray(attention.slot_distances(lengths, positions, 8))
    np.testing.assert_array_equal(dist[0, 1, :4], [5, 4, 3, 2])  # committed slot s at s
    np.testing.assert_array_equal(dist[0, 2, 4:7], [1, 0, 0])  # new slots at their positions
    np.testing.assert_array_equal(dist[1, 0, :3], [0, -1, -1])
    jax.block_until_ready(dist)
