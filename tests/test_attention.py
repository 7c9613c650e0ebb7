"""Attention over the live length (``specjax.models.attention``): the static windows (the
default) and the chunked loop equal one softmax over the allowed slots of the whole cache; and
decoding gives the same tokens whichever is used."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import PROGRAMS
from specjax.drafters import ModelDrafter
from specjax.models import KVCache, Llama, attention
from specjax.sampling import SamplingParams
from specjax.testing import pair, tiny_config


def dense(q, cache_k, cache_v, lengths, new_mask, kv_mask=None):
    """The reference: one ``[B, T, S]`` mask and one softmax over every slot of the cache (what
    specjax computed before the windows)."""
    s = cache_k.shape[1]
    allowed = attention.allowed_slots(lengths, new_mask, s) if kv_mask is None else kv_mask
    scores = jnp.einsum("btgre,bsge->bgrts", q, cache_k).astype(jnp.float32) * q.shape[-1] ** -0.5
    scores = jnp.where(allowed[:, None, None], scores, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bgrts,bsge->btgre", jax.nn.softmax(scores, axis=-1), cache_v)


def random_inputs(seed, b=4, t=5, s=128, g=2, r=2, e=8, lengths=(0, 3, 17, 40)):
    """Queries, a cache of 128 slots whose slots from 64 on hold NaN (past the longest row's
    window: never read), lengths and a tree mask (every node sees itself)."""
    keys = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(keys[0], (b, t, g, r, e))
    live = (jnp.arange(s) < 64)[None, :, None, None]  # [1, S, 1, 1]
    cache_k, cache_v = (
        jnp.where(live, jax.random.normal(keys[i], (b, s, g, e)), jnp.nan) for i in (1, 2)
    )
    tree = jax.random.bernoulli(keys[3], 0.5, (b, t, t)) | jnp.eye(t, dtype=bool)
    return q, cache_k, cache_v, jnp.asarray(lengths, jnp.int32), tree


@pytest.mark.parametrize("smallest", [8, 16, 64])  # the longest row needs 45 slots: W = 64
def test_the_window_equals_one_softmax_over_the_whole_cache(smallest):
    q, ck, cv, lengths, tree = random_inputs(0)
    finite = jnp.nan_to_num(ck), jnp.nan_to_num(cv)  # the dense form reads every slot
    run = jax.jit(
        lambda q, ck, cv, lengths, mask, kv=None: attention.attend_windows(
            q,
            ck[None],
            cv[None],
            0,
            lengths,
            mask,
            kv,
            scale=8**-0.5,
            dtype=jnp.float32,
            smallest=smallest,
        )
    )
    got = run(q, ck, cv, lengths, tree)
    assert np.isfinite(np.asarray(got)).all()  # no stale slot was read
    np.testing.assert_allclose(got, dense(q, *finite, lengths, tree), atol=1e-6, rtol=1e-6)
    # a draft tree grown over several calls: a [B, T, S] mask of its own
    kv = attention.allowed_slots(lengths, tree, 128) & jax.random.bernoulli(
        jax.random.key(9), 0.6, (4, 5, 128)
    )
    kv = kv | (jnp.arange(128)[None, None] == (lengths[:, None] + jnp.arange(5))[..., None])
    got = run(q, ck, cv, lengths, tree, kv)
    np.testing.assert_allclose(got, dense(q, *finite, lengths, tree, kv), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "chunk", [pytest.param(7, marks=pytest.mark.slow), pytest.param(16, marks=pytest.mark.slow), 48]
)
def test_the_chunks_equal_one_softmax_over_the_whole_cache(chunk):
    """The chunked loop (the measured alternative to the windows) reads only the chunks the
    longest row needs and merges them exactly."""
    q, ck, cv, lengths, tree = random_inputs(1)
    finite = jnp.nan_to_num(ck), jnp.nan_to_num(cv)
    kw = dict(scale=8**-0.5, dtype=jnp.float32, chunk=chunk)
    run = jax.jit(lambda *a: attention.attend_chunks(a[0], a[1][None], a[2][None], 0, *a[3:], **kw))
    got = run(q, ck, cv, lengths, tree)
    assert np.isfinite(np.asarray(got)).all()  # no slot past the longest row was read
    np.testing.assert_allclose(got, dense(q, *finite, lengths, tree), atol=1e-6, rtol=1e-6)
    kv = attention.allowed_slots(lengths, tree, 128) & jax.random.bernoulli(
        jax.random.key(3), 0.6, (4, 5, 128)
    )
    kv = kv | (jnp.arange(128)[None, None] == (lengths[:, None] + jnp.arange(5))[..., None])
    got = run(q, ck, cv, lengths, tree, kv)
    np.testing.assert_allclose(got, dense(q, *finite, lengths, tree, kv), atol=1e-6, rtol=1e-6)
    # a row near the capacity: with 48-slot chunks the third starts at 80, not 96, and skips
    # the slots the second counted
    long = jnp.asarray([0, 3, 17, 120], jnp.int32)
    got = run(q, *finite, long, tree)
    np.testing.assert_allclose(got, dense(q, *finite, long, tree), atol=1e-6, rtol=1e-6)


def test_windows():
    assert attention.windows(64, 256) == (64,)
    assert attention.windows(8192, 256) == (256, 512, 1024, 2048, 4096, 8192)
    assert attention.windows(600, 256) == (256, 512, 600)


def dense_attend(q, cache_k, cache_v, layer, lengths, new_mask, kv_mask=None, **kw):
    """:func:`dense` in place of :func:`specjax.models.attention.attend`."""
    del kw
    return dense(q, cache_k[layer], cache_v[layer], lengths, new_mask, kv_mask)


def prefill_then_tree(model, monkeypatch, smallest, capacity, vocab, chunk=0):
    """Logits of a 40-token prefill and of a 6-node tree after rows of 40, 23 and 9 tokens,
    compiled as decoding runs them: windows from ``smallest``, or ``chunk``-slot chunks
    (``smallest=None``: the dense attention)."""
    tokens = jax.random.randint(jax.random.key(1), (3, 40), 0, vocab)
    cache = KVCache.init(model.config, 3, capacity)
    tree = jnp.broadcast_to(jnp.tril(jnp.ones((6, 6), bool)).at[3, 1:3].set(False), (3, 6, 6))
    positions = jnp.asarray(
        [[40, 41, 42, 41, 42, 43], [23, 24, 25, 24, 25, 26], [9, 10, 11, 10, 11, 12]]
    )
    if smallest is None:
        monkeypatch.setattr(attention, "attend", dense_attend)
    else:
        monkeypatch.setattr(attention, "MIN_WINDOW", smallest)
        monkeypatch.setattr(attention, "CHUNK", chunk)
    prefill = nnx.jit(lambda m, x, c: m(x, cache=c))  # traced anew under this patch
    tree_call = nnx.jit(lambda m, x, c: m(x, cache=c, positions=positions, attn_mask=tree))
    logits, c = prefill(model, tokens, cache)
    more, _ = tree_call(model, tokens[:, :6], c.rollback(jnp.asarray([40, 23, 9], jnp.int32)))
    monkeypatch.undo()
    return np.asarray(logits), np.asarray(more)


@pytest.mark.parametrize("smallest,chunk", [(8, 0), pytest.param(256, 8, marks=pytest.mark.slow)])
def test_model_logits_equal_one_softmax_over_the_cache(monkeypatch, smallest, chunk):
    """A prefill, then a tree-shaped call, on a cache of 256 slots: windows of 8 .. 256 (and, in
    the slow tier, 8-slot chunks) give the logits of the dense ``[B, T, S]`` attention within
    1e-5 (fp32)."""
    model = Llama(tiny_config(48), rngs=nnx.Rngs(0))
    want = prefill_then_tree(model, monkeypatch, None, 256, 48)
    got = prefill_then_tree(model, monkeypatch, smallest, 256, 48, chunk)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_smollm2_logits_equal_one_softmax_over_the_cache(smollm2, monkeypatch):
    """The same on SmolLM2-135M's real weights, with a cache of 1024 slots (windows from 256).
    (The chunks' other order of sums moves these logits by up to 6e-5: they are not the
    default.)"""
    want = prefill_then_tree(smollm2.model, monkeypatch, None, 1024, 49152)
    got = prefill_then_tree(smollm2.model, monkeypatch, 256, 1024, 49152)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "verifier,k",  # slow: the default tier checks the windows' logits against dense attention
    [
        pytest.param("block", 1, marks=pytest.mark.slow),
        pytest.param("gbv", 3, marks=pytest.mark.slow),
    ],
)
def test_greedy_tokens_do_not_depend_on_the_windows(monkeypatch, verifier, k):
    target, draft = pair(48, sigma=0.3)
    prompts = [[1, 2, 3], [5] * 30, [7, 8]]
    config = DecodeConfig(verifier, SamplingParams(temperature=0.0), 60)
    tokens = {}
    # capacity 128: windows 16 .. 128, or one; or the chunked loop over 16-slot chunks
    for smallest, chunk in ((16, 0), (1024, 0), (1024, 16)):
        monkeypatch.setattr(attention, "MIN_WINDOW", smallest)
        monkeypatch.setattr(attention, "CHUNK", chunk)
        PROGRAMS.clear()  # trace and compile anew with these windows
        jax.clear_caches()
        tokens[smallest, chunk] = generate(
            target,
            prompts,
            config,
            ModelDrafter(draft, num_paths=k, draft_len=3, sampling=config.sampling),
        ).tokens
    assert tokens[16, 0] == tokens[1024, 0] == tokens[1024, 16]
    ar = generate(target, prompts, DecodeConfig("autoregressive", config.sampling, 60)).tokens
    assert tokens[16, 0] == ar
    monkeypatch.undo()  # later tests compile with the default attention
    PROGRAMS.clear()
    jax.clear_caches()
