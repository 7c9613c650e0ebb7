"""The feature (EAGLE-class) drafter: greedy speculative output == autoregressive output (chain and
K = 3 paths, a batch of mixed lengths), the sequence law at temperature 1 with a draft vocabulary
smaller than V (and the same test catching a law renormalised over V instead of scattered), the
target features handed to the head sit at the right positions, and the head's training forward
computes what drafting computes."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import sampling
from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import prefill_program, prepare, step
from specjax.drafters.feature import FeatureDrafter
from specjax.models import Decoder
from specjax.models.cache import KVCache
from specjax.models.eagle import EagleConfig, EagleHead
from specjax.models.eagle_formats import export_head, load_head, save_head
from specjax.models.pure import PureModel
from specjax.testing import sharpened, tiny_config
from tests.test_decode_lossless import NEW, PROMPT, ROWS, chi_square_pvalue, exact_joint

GREEDY = sampling.SamplingParams(temperature=0.0)
PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [4]]


def random_head(target: PureModel, draft_vocab: int, seed: int = 0, layers=(0, 1)) -> EagleHead:
    """A randomly initialised head over a random draft vocabulary of ``draft_vocab`` ids."""
    c = target.config
    config = EagleConfig.for_target(c, layers, draft_vocab)
    d2t = np.sort(np.random.default_rng(seed).permutation(c.vocab_size)[:draft_vocab])
    embed = target.module.embed[...]
    return EagleHead.create(config, embed, d2t, seed=seed, head_rows=embed[d2t] * 4.0)


def published_head(target: PureModel, draft_vocab: int, where, seed: int = 0) -> EagleHead:
    """A random head in the speculators layout, as users download one, read back by
    ``load_head``: two layers (the second a plain block), biases, a Qwen3-type layer's q/k
    norms, ``norm_before_residual`` and EAGLE-3.1's ``fc_norm`` and ``norm_output``, every
    norm and bias off its initial value."""
    c = target.config
    config = dataclasses.replace(
        EagleConfig.for_target(c, (-1, 0, 1), draft_vocab),
        num_layers=2,
        attention_bias=True,
        qk_norm=True,
        norm_before_residual=True,
        fc_norm=True,
        norm_output=True,
    )
    d2t = np.sort(np.random.default_rng(seed).permutation(c.vocab_size)[:draft_vocab])
    embed = target.module.embed[...]
    head = EagleHead.create(config, embed, d2t, seed=seed, head_rows=embed[d2t] * 4.0)
    state = nnx.state(head, nnx.Param)
    noise = lambda x, k: x + 0.2 * jax.random.normal(jax.random.key(k), x.shape)
    leaves, tree = jax.tree.flatten(state)
    nnx.update(head, jax.tree.unflatten(tree, [noise(x, i) for i, x in enumerate(leaves)]))
    return load_head(export_head(where, head, "speculators"), target.module)


@pytest.fixture(scope="module")
def target():
    return PureModel.of(sharpened(Decoder(tiny_config(12, name="t"), rngs=nnx.Rngs(3)), 3.0))


@pytest.fixture(scope="module")
def autoregressive(target):
    cfg = DecodeConfig("autoregressive", GREEDY, max_new_tokens=24)
    return generate(target, PROMPTS, cfg).tokens


@pytest.mark.parametrize(
    "verifier,k", [pytest.param("block", 1, marks=pytest.mark.slow), ("greedy", 1), ("gbv", 3)]
)
def test_greedy_speculative_equals_autoregressive(target, autoregressive, verifier, k):
    drafter = FeatureDrafter(random_head(target, 8), num_paths=k, draft_len=3, sampling=GREEDY)
    out = generate(target, PROMPTS, DecodeConfig(verifier, GREEDY, 24), drafter)
    assert out.tokens == autoregressive
    hist = out.metrics.accepted_length_histogram
    assert hist[0] > 0 and sum(hist[1:]) > 0  # rejections and acceptances in one run


@pytest.mark.parametrize(
    "verifier,k",
    [
        ("block", 1),
        ("specinfer", 3),
        *(pytest.param(v, k, marks=pytest.mark.slow) for v, k in [("greedy", 1), ("token", 1),
                                                                 ("spectr", 2), ("gbv", 3)]),
    ],
)  # fmt: skip
def test_a_downloaded_heads_greedy_drafts_equal_autoregressive(
    target, autoregressive, verifier, k, tmp_path
):
    """A head read from the speculators layout (every published switch on) drafts exactly."""
    head = published_head(target, 8, tmp_path / "head")
    drafter = FeatureDrafter(head, num_paths=k, draft_len=3, sampling=GREEDY)
    out = generate(target, PROMPTS, DecodeConfig(verifier, GREEDY, 24), drafter)
    assert out.tokens == autoregressive


@pytest.mark.slow  # ~6 s: default-tier time
def test_features_handed_to_the_head_are_the_targets_at_their_positions(target):
    """After prefill and after each step, pending pair i (at position c + i, c = the head's
    cache length) carries the target's teacher-forced hidden states of position c + i - 1."""
    drafter = FeatureDrafter(random_head(target, 8), num_paths=2, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("specinfer", GREEDY, 24)
    b = prepare(target, drafter, PROMPTS, cfg)
    init = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
    state = init(target, drafter, b.prompts, b.lengths, b.active, np.int32(0),
                 capacity=b.capacity, buffer=b.buffer)  # fmt: skip
    one = jax.jit(step, static_argnames=("config",))
    # Teacher-forced hidden states of whole rows (causal: what follows a row's length is moot).
    forced = jax.jit(lambda m, x: m(x, features=drafter.feature_layers).features)
    for _ in range(4):
        ds = state.draft_state
        seen, n_p = np.asarray(ds.cache.lengths), np.asarray(ds.num_pending)
        lengths = np.asarray(state.lengths)
        hidden = np.asarray(forced(target, state.tokens))  # [B, S, A, D]
        for r in range(len(PROMPTS)):
            assert seen[r] + n_p[r] == lengths[r]
            for i in range(n_p[r]):
                pos = seen[r] + i - 1
                want = np.zeros_like(ds.pending[r, i]) if pos < 0 else hidden[r, pos]
                np.testing.assert_allclose(ds.pending[r, i], want, atol=2e-5)
        state = one(target, drafter, state, cfg)


@pytest.mark.slow  # ~11 s; the drafting side's exactness tests stay in the default tier
def test_training_forward_matches_drafting(target):
    """Step 0 and step 1 of the training-time test compute the logits drafting computes for the
    same pairs (step 1: a pair fed with the head's own previous output)."""
    head = random_head(target, 8, layers=(1,))
    tokens = jnp.asarray([[3, 1, 4, 1, 5, 9, 2, 6]])
    hidden = target(tokens, features=(1,)).features
    t = tokens.shape[1]
    g0 = head.fuse(jnp.concatenate([jnp.zeros_like(hidden[:, :1]), hidden[:, :-1]], axis=1))
    pos = jnp.arange(t)[None]
    q0, k0, v0 = head.qkv(g0, tokens, pos)
    first = pos == 0  # the first pair, hidden from the others as in drafting
    h0, logits0 = head.finish(g0, head.ttt_attention(q0, [k0], [v0], first))
    # Step 1 at index j: own output h0[j] with token j + 1 at position j + 1.
    q1, k1, v1 = head.qkv(h0[:, :-1], tokens[:, 1:], pos[:, 1:])
    step1 = head.ttt_attention(q1, [k0[:, :-1], k1], [v0[:, :-1], v1], first[:, :-1])
    _, logits1 = head.finish(h0[:, :-1], step1)
    cache = KVCache.init(head.config, 1, 16)
    h, logits, cache = head(g0, tokens, cache=cache)
    np.testing.assert_allclose(logits, logits0, atol=1e-4)
    for j in range(t - 1):  # draft one token ahead of the committed prefix tokens[:, : j + 1]
        c = cache.rollback(jnp.asarray([j + 1]))
        _, lg, _ = head(h[:, j : j + 1], tokens[:, j + 1 : j + 2], cache=c)
        np.testing.assert_allclose(lg[0, 0], logits1[0, j], atol=1e-4)


def test_one_pair_per_row_is_the_full_feeds_row(target):
    """``last`` computes pair ``last[b]``'s outputs alone (rows of mixed cache lengths), as the
    feed of every pair does at that row, and writes every pair's keys and values alike."""
    head = random_head(target, 8)
    rng = np.random.default_rng(1)
    b, t, d = 3, 4, target.config.dim
    g = jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, target.config.vocab_size, (b, t)), jnp.int32)
    filled = head(
        jnp.asarray(rng.normal(size=(b, 6, d)), jnp.float32),
        jnp.asarray(rng.integers(0, target.config.vocab_size, (b, 6)), jnp.int32),
        cache=KVCache.init(head.config, b, 16),
    )[2]
    cache = filled.rollback(jnp.asarray([6, 2, 4]))
    last = jnp.asarray([3, 0, 2])
    h, logits, full = head(g, tokens, cache=cache)
    h1, logits1, one = head(g, tokens, cache=cache, last=last)
    assert h1.shape == (b, 1, d) and logits1.shape == (b, 1, 8)
    rows = np.arange(b)
    np.testing.assert_allclose(h1[:, 0], h[rows, last], atol=1e-5)
    np.testing.assert_allclose(logits1[:, 0], logits[rows, last], atol=1e-5)
    assert np.array_equal(one.k, full.k) and np.array_equal(one.lengths, full.lengths)
    with pytest.raises(ValueError, match="no mask"):
        head(g, tokens, cache=cache, last=last, attn_mask=jnp.ones((b, t, t), bool))


def test_save_and_load_round_trip(target, tmp_path):
    head = random_head(target, 8)
    save_head(tmp_path / "head", head, {"note": "x"})
    back = load_head(tmp_path / "head", target.module)
    g = jnp.ones((1, 2, 2, target.config.dim))
    np.testing.assert_allclose(back.fuse(g), head.fuse(g), rtol=1e-3, atol=1e-3)  # float16
    assert np.array_equal(back.d2t[...], head.d2t[...])
    other = Decoder(tiny_config(7, name="other"), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="V = 12"):
        load_head(tmp_path / "head", other)


V = 4


@pytest.fixture(scope="module")
def small_target():
    return PureModel.of(sharpened(Decoder(tiny_config(V, name="t"), rngs=nnx.Rngs(10)), 1.0))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RenormalisingDrafter(FeatureDrafter):
    """Planted bug: reports the head's law renormalised over all V ids (the ids outside the draft
    vocabulary given logit 0) instead of the scattered law it sampled from."""

    def _law(self, logits):
        q_w, _ = super()._law(logits)
        full = jnp.zeros((*logits.shape[:-1], self.vocab_size)).at[..., self.head.module.d2t[...]]
        return q_w, jax.nn.softmax(full.set(logits), axis=-1)


@pytest.mark.parametrize(
    "cls,honest,verifier,k",
    [  # Monte-Carlo over whole sequences: the slow tier (tests/test_draft_laws.py: the laws)
        pytest.param(FeatureDrafter, True, "block", 1, marks=pytest.mark.slow),
        pytest.param(FeatureDrafter, True, "gbv", 3, marks=pytest.mark.slow),
        pytest.param(RenormalisingDrafter, False, "block", 1, marks=pytest.mark.slow),
    ],
)
def test_sequence_law_at_temperature_one(small_target, cls, honest, verifier, k):
    params = sampling.SamplingParams(temperature=1.0)
    head = random_head(small_target, 3, seed=5)
    drafter = cls(head, num_paths=k, draft_len=2, sampling=params)
    cfg = DecodeConfig(verifier, params, max_new_tokens=NEW)
    out = generate(small_target, [PROMPT] * ROWS, cfg, drafter, seed=7)
    assert out.metrics.accepted_tokens > 0.1 * ROWS
    p = chi_square_pvalue(out.tokens, exact_joint(small_target, params))
    assert p > 1e-3 if honest else p < 1e-6
