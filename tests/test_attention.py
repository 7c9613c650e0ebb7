"""Attention over the live length (``specjax.models.attention``): the static windows (the
default) and the chunked loop equal one softmax over the allowed slots of the whole cache; and
decoding gives the same tokens whichever is used."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import tree
from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import PROGRAMS, compile_generation, prepare
from specjax.drafters import ModelDrafter
from specjax.models import Decoder, KVCache, attention, attention_windows
from specjax.sampling import SamplingParams
from specjax.testing import pair, tiny_config


def dense(q, cache_k, cache_v, lengths, new_mask, kv_mask=None):
    """The reference: one ``[B, T, S]`` mask and one softmax over every slot of the cache (what
    specjax computed before the windows)."""
    s = cache_k.shape[1]
    if kv_mask is None:
        allowed = attention.allowed_slots(lengths, new_mask, s)
    else:
        allowed = kv_mask.allowed(0, s)  # [B, T, S]: the one place it is built whole
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


def grown_tree(lengths, width, seed, levels=3):
    """A :class:`~specjax.tree.LevelMask` whose current level (``levels - 1``) is the ``width``
    new tokens at ``lengths ..``: level 0 at ``lengths - (levels - 1) * width`` (clipped at 0),
    each column seeing a random part of the prefix before it."""
    scratch = jnp.maximum(lengths - (levels - 1) * width, 0)
    fraction = jax.random.uniform(jax.random.key(seed), (lengths.shape[0], width))
    visible = (fraction * scratch[:, None]).astype(jnp.int32)  # [B, W]
    return tree.level_kv_mask(visible, scratch, levels)


def old_level_mask(visible, scratch, levels, capacity):
    """The ``[B, W, S]`` mask specjax built before :class:`~specjax.tree.LevelMask`."""
    s = jnp.arange(capacity)[None, None, :]
    rel = s - scratch[:, None, None]
    column = jnp.arange(visible.shape[1])[None, :, None]
    own = (rel >= 0) & (rel < levels * visible.shape[1]) & (rel % visible.shape[1] == column)
    return (s < visible[..., None]) | own


def test_a_level_mask_is_the_old_whole_mask_slice_by_slice():
    lengths = jnp.asarray([12, 30, 17, 40], jnp.int32)
    mask = grown_tree(lengths, 4, 0)
    whole = old_level_mask(mask.visible, mask.scratch, 3, 64)  # [B, W, S]
    np.testing.assert_array_equal(mask.allowed(0, 64), whole)
    for start, size in ((0, 16), (16, 16), (40, 24), (jnp.int32(5), 7)):
        np.testing.assert_array_equal(mask.allowed(start, size), whole[:, :, start : start + size])
    full = np.asarray(mask.allowed(0, 64))  # the current level's nodes: at lengths + w
    for b, n in enumerate(np.asarray(lengths)):
        for w in range(4):
            assert full[b, w, n + w]  # each node sees itself
            assert not full[b, w, [n + x for x in range(4) if x != w]].any()  # not its siblings


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
    # a draft tree grown over several calls: its level mask, asked for the window's slots
    kv = grown_tree(lengths, 5, 9)
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
    kv = grown_tree(lengths, 5, 3)
    got = run(q, ck, cv, lengths, tree, kv)
    np.testing.assert_allclose(got, dense(q, *finite, lengths, tree, kv), atol=1e-6, rtol=1e-6)
    # a row near the capacity: with 48-slot chunks the third starts at 80, not 96, and skips
    # the slots the second counted
    long = jnp.asarray([0, 3, 17, 120], jnp.int32)
    got = run(q, *finite, long, tree)
    np.testing.assert_allclose(got, dense(q, *finite, long, tree), atol=1e-6, rtol=1e-6)


def test_windows():
    assert attention_windows.windows(64, 256) == (64,)
    assert attention_windows.windows(8192, 256) == (256, 512, 1024, 2048, 4096, 8192)
    assert attention_windows.windows(600, 256) == (256, 512, 600)


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
        monkeypatch.setattr(attention_windows, "MIN_WINDOW", smallest)
        monkeypatch.setattr(attention, "CHUNK", chunk)
    prefill = nnx.jit(lambda m, x, c: m(x, cache=c))  # traced anew under this patch
    tree_call = nnx.jit(lambda m, x, c: m(x, cache=c, positions=positions, attn_mask=tree))
    logits, c, _ = prefill(model, tokens, cache)
    more, _, _ = tree_call(model, tokens[:, :6], c.rollback(jnp.asarray([40, 23, 9], jnp.int32)))
    monkeypatch.undo()
    return np.asarray(logits), np.asarray(more)


@pytest.mark.parametrize("smallest,chunk", [(8, 0), pytest.param(256, 8, marks=pytest.mark.slow)])
def test_model_logits_equal_one_softmax_over_the_cache(monkeypatch, smallest, chunk):
    """A prefill, then a tree-shaped call, on a cache of 256 slots: windows of 8 .. 256 (and, in
    the slow tier, 8-slot chunks) give the logits of the dense ``[B, T, S]`` attention within
    1e-5 (fp32)."""
    model = Decoder(tiny_config(48), rngs=nnx.Rngs(0))
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
        monkeypatch.setattr(attention_windows, "MIN_WINDOW", smallest)
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


def test_no_mask_spans_the_whole_cache(monkeypatch):
    """With the chunked attention, the compiled prefill and decode programs of a K = 3 tree
    with a model drafter build no boolean mask over every cache slot (``pred[..., S]``):
    verification, prefill and the draft tree grown over several calls (its
    :class:`~specjax.tree.LevelMask`) ask only for the slots of the chunk they read. (The
    windows' largest window is the whole cache, so they are checked by their logits instead.)"""
    monkeypatch.setattr(attention, "CHUNK", 32)
    PROGRAMS.clear()
    jax.clear_caches()
    target, draft = pair(48, sigma=0.3)
    drafter = ModelDrafter(draft, num_paths=3, draft_len=3, sampling=SamplingParams(0.0))
    cfg = DecodeConfig("gbv", SamplingParams(0.0), 200)
    prompts = [[1, 2, 3], [5, 6]]
    s = prepare(target, drafter, prompts, cfg).capacity
    programs = compile_generation(target, prompts, cfg, drafter)
    monkeypatch.undo()
    PROGRAMS.clear()
    jax.clear_caches()
    assert s >= 4 * 32, s
    for program in programs:
        whole = re.findall(rf"pred\[[\d,]*\b{s}\]", program.as_text())
        assert not whole, whole[:3]
