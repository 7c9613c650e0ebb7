"""The Llama model: cached decoding == full forward, tree attention == sequential scoring,
rollback + compaction == decoding the accepted tokens, presets and clear errors."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.models import Decoder, KVCache, ModelConfig, RopeScaling, config, rope


@nnx.jit
def fwd(model, tokens, cache=None, positions=None, attn_mask=None):
    """A jitted forward (the model's own call, compiled once per shape)."""
    return model(tokens, cache=cache, positions=positions, attn_mask=attn_mask)


@pytest.fixture(scope="module", params=["tied", "untied-gqa"])
def model(request):
    if request.param == "tied":
        cfg = config.tiny(tie_embeddings=True, rope_scaling=RopeScaling(original_max_position=16))
    else:
        cfg = config.tiny(num_heads=6, num_kv_heads=2, dim=48, tie_embeddings=False)
    return Decoder(cfg, rngs=nnx.Rngs(0))


def rel_err(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


def test_cached_incremental_decoding_equals_full_forward(model):
    cfg = model.config
    b, t = 3, 12
    tokens = jax.random.randint(jax.random.key(1), (b, t), 0, cfg.vocab_size)
    full = fwd(model, tokens).logits
    assert full.shape == (b, t, cfg.vocab_size) and full.dtype == jnp.float32
    cache = KVCache.init(cfg, b, 40)
    logits, cache, _ = fwd(model, tokens[:, :5], cache=cache)
    chunks = [logits]
    for i in range(5, t, 2):  # chunks of 2, then 1
        logits, cache, _ = fwd(model, tokens[:, i : i + 2], cache=cache)
        chunks.append(logits)
    assert rel_err(jnp.concatenate(chunks, axis=1), full) < 1e-5
    np.testing.assert_array_equal(np.asarray(cache.lengths), [t] * b)


def test_logits_to_keep_runs_the_head_on_the_last_positions(model):
    cfg = model.config
    tokens = jax.random.randint(jax.random.key(2), (2, 9), 0, cfg.vocab_size)
    full, _, _ = model(tokens, cache=KVCache.init(cfg, 2, 16))
    last, cache, _ = model(tokens, cache=KVCache.init(cfg, 2, 16), logits_to_keep=2)
    assert last.shape == (2, 2, cfg.vocab_size)
    np.testing.assert_allclose(np.asarray(last), np.asarray(full[:, -2:]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(cache.lengths), [9, 9])


def test_rows_with_different_lengths(model):
    """Per-row cache lengths: each row's logits equal its own full forward."""
    cfg = model.config
    tokens = jax.random.randint(jax.random.key(2), (2, 9), 0, cfg.vocab_size)
    cache = KVCache.init(cfg, 2, 32)
    _, cache, _ = fwd(model, tokens[:, :6], cache=cache)
    cache = cache.rollback(jnp.array([6, 4]))  # row 1 forgets its last two tokens
    nxt = jnp.stack([tokens[0, 6:8], tokens[1, 4:6]])
    logits, cache, _ = fwd(model, nxt, cache=cache)
    assert rel_err(logits[0], fwd(model, tokens[:1, :8]).logits[0, 6:]) < 1e-5
    assert rel_err(logits[1], fwd(model, tokens[1:, :6]).logits[0, 4:]) < 1e-5


def tree_inputs(lengths, paths):
    """Path-major flattening of K paths of length L into T = K * L nodes."""
    b, k, l = paths.shape
    depth = jnp.tile(jnp.arange(l), k)  # [T]
    path = jnp.repeat(jnp.arange(k), l)
    mask = (path[:, None] == path[None, :]) & (depth[None, :] <= depth[:, None])  # [T, T]
    positions = lengths[:, None] + depth[None, :]
    return paths.reshape(b, k * l), positions, jnp.broadcast_to(mask, (b, k * l, k * l))


def test_tree_attention_equals_sequential_scoring(model):
    cfg = model.config
    b, k, l, prompt = 2, 3, 4, 5
    prefix = jax.random.randint(jax.random.key(3), (b, prompt), 0, cfg.vocab_size)
    paths = jax.random.randint(jax.random.key(4), (b, k, l), 0, cfg.vocab_size)
    paths = paths.at[:, 1, :2].set(paths[:, 0, :2])  # paths 0 and 1 share a prefix
    cache = KVCache.init(cfg, b, 48)
    _, cache, _ = fwd(model, prefix, cache=cache)
    tokens, positions, mask = tree_inputs(cache.lengths, paths)
    logits, tree_cache, _ = fwd(model, tokens, cache=cache, positions=positions, attn_mask=mask)
    assert int(tree_cache.lengths[0]) == prompt + k * l
    for j in range(k):
        seq = fwd(model, jnp.concatenate([prefix, paths[:, j]], axis=1)).logits[:, prompt:]
        assert rel_err(logits[:, j * l : (j + 1) * l], seq) < 1e-5


def test_rollback_and_compaction_equal_decoding_the_accepted_tokens(model):
    cfg = model.config
    b, k, l, prompt = 3, 2, 3, 4
    prefix = jax.random.randint(jax.random.key(5), (b, prompt), 0, cfg.vocab_size)
    paths = jax.random.randint(jax.random.key(6), (b, k, l), 0, cfg.vocab_size)
    cache = KVCache.init(cfg, b, 32)
    _, cache, _ = fwd(model, prefix, cache=cache)
    tokens, positions, mask = tree_inputs(cache.lengths, paths)
    _, tree_cache, _ = fwd(model, tokens, cache=cache, positions=positions, attn_mask=mask)
    path = jnp.array([1, 0, 1])
    tau = jnp.array([2, 0, 3])  # mixed accepted lengths, including none and all
    sources = cache.lengths[:, None] + path[:, None] * l + jnp.arange(l)[None, :]
    compact = tree_cache.compact(cache.lengths, sources, tau)
    np.testing.assert_array_equal(np.asarray(compact.lengths), prompt + np.asarray(tau))
    for i in range(b):
        accepted = paths[i, path[i], : tau[i]]
        ref = KVCache.init(cfg, 1, 32)
        _, ref, _ = fwd(model, jnp.concatenate([prefix[i], accepted])[None], cache=ref)
        n = prompt + int(tau[i])
        np.testing.assert_allclose(compact.k[:, i, :n], ref.k[:, 0, :n], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(compact.v[:, i, :n], ref.v[:, 0, :n], rtol=1e-5, atol=1e-6)
    # Decoding on from the compacted cache matches a fresh forward over the accepted sequence.
    nxt = jnp.full((b, 1), 7)
    logits, _, _ = fwd(model, nxt, cache=compact)
    for i in range(b):
        seq = jnp.concatenate([prefix[i], paths[i, path[i], : tau[i]], nxt[i]])[None]
        assert rel_err(logits[i, 0], fwd(model, seq).logits[0, -1]) < 1e-5


def test_bfloat16_model_runs_close_to_fp32():
    cfg32 = config.tiny()
    m32 = Decoder(cfg32, rngs=nnx.Rngs(0))
    m16 = Decoder(dataclasses.replace(cfg32, dtype="bfloat16"), rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(7), (2, 8), 0, cfg32.vocab_size)
    assert rel_err(fwd(m16, tokens).logits, fwd(m32, tokens).logits) < 5e-2


@pytest.mark.parametrize(
    "name",
    [
        "llama3-8b",
        "smollm2-135m",
        pytest.param("llama3-70b", marks=pytest.mark.slow),
        pytest.param("llama3.1-70b", marks=pytest.mark.slow),
    ],
)
def test_full_size_presets_eval_shape_only(name):
    cfg = config.preset(name)
    state = jax.eval_shape(lambda: nnx.state(Decoder(cfg, rngs=nnx.Rngs(0))))
    total = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(state))
    assert total == cfg.num_params
    expected = {"llama3-8b": 8.03e9, "llama3-70b": 70.55e9, "smollm2-135m": 134.5e6}
    if name in expected:
        assert abs(total / expected[name] - 1) < 1e-3
    model = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
    cache = jax.eval_shape(lambda: KVCache.init(cfg, 1, 64))
    out = jax.eval_shape(lambda m, c: m(jnp.zeros((1, 4), jnp.int32), cache=c), model, cache)
    assert out[0].shape == (1, 4, cfg.vocab_size)


def test_llama31_rope_scaling_matches_reference_values():
    inv = rope.inverse_frequencies(128, 500000.0, RopeScaling())
    plain = rope.inverse_frequencies(128, 500000.0, None)
    assert inv[0] == plain[0]  # highest frequency untouched
    np.testing.assert_allclose(inv[-1], plain[-1] / 8.0)  # lowest frequency slowed by factor 8
    assert (inv <= plain).all()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_heads=4, num_kv_heads=3), r"num_kv_heads \(3\) must divide num_heads \(4\)"),
        (dict(dim=30, num_heads=4), r"num_heads \(4\) must divide dim \(30\)"),
        (dict(dtype="float8"), "dtype"),
        (dict(vocab_size=0), "vocab_size must be >= 1"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        config.tiny(**kwargs)


def test_unknown_preset_and_prompt_longer_than_cache():
    with pytest.raises(ValueError, match="unknown model preset 'llama9'"):
        config.preset("llama9")
    cfg = config.tiny()
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="12 new tokens do not fit a KV cache of capacity 8"):
        fwd(model, jnp.zeros((1, 12), jnp.int32), cache=KVCache.init(cfg, 1, 8))


def test_config_is_frozen():
    cfg = ModelConfig(vocab_size=8, dim=8, num_layers=1, num_heads=2, num_kv_heads=1, ffn_dim=8)
    assert cfg.head_dim == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.dim = 16


def test_tied_logits_equal_the_dot_at_every_row_count():
    """The tied head's multiply-and-reduce (XLA:CPU, 2-7 rows) gives the dot's logits."""
    from specjax.models import decoder

    key_x, key_e = jax.random.split(jax.random.key(0))
    embed = jax.random.normal(key_e, (97, 16), jnp.float32)
    for b, t in [(1, 1), (1, 2), (1, 4), (2, 3), (1, 7), (2, 4), (1, 13)]:
        x = jax.random.normal(key_x, (b, t, 16), jnp.float32)
        got = jax.jit(decoder.tied_logits)(x, embed)
        want = jnp.einsum("btd,vd->btv", x, embed, precision="highest")
        assert got.shape == (b, t, 97)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
