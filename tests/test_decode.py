"""The decoding loop: greedy speculative output == greedy autoregressive output for every
verifier, batches with mixed accepted lengths, stop tokens mid-draft, determinism, row
independence, drafters and tree drafting."""

from __future__ import annotations

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import sampling
from specjax.decode import DecodeConfig, Stream, generate
from specjax.decode.seams import prefill_program, prepare, step
from specjax.decode.ssd import SSDConfig, SSDDrafter
from specjax.drafters import FeatureDrafter, ModelDrafter, NgramDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel, truncated
from specjax.sampling import SamplingParams
from specjax.testing import pair, tiny_config

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [12]]
CASES = [
    pytest.param("greedy", 1, marks=pytest.mark.slow),
    pytest.param("token", 1, marks=pytest.mark.slow),
    pytest.param("block", 1, marks=pytest.mark.slow),
    ("gbv", 3),
    # The default tier keeps one multi-path case (GBV; the model drafter's chain with block is
    # tests/test_widths.py's random-widths case, the feature drafter's its own); the other
    # verifiers' decode loops run in the slow tier (each verifier's own exactness tests,
    # greedy equivalence included, are in tests/test_verify_*.py).
    *(pytest.param(v, 3, marks=pytest.mark.slow) for v in ("specinfer", "spectr")),
    *(pytest.param(v, 1, marks=pytest.mark.slow) for v in ("specinfer", "spectr", "gbv")),
]


@pytest.fixture(scope="module")
def models():
    return pair(sigma=0.05)


@pytest.fixture(scope="module")
def autoregressive(models):
    target, _ = models
    out = generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, max_new_tokens=30))
    return out.tokens


def initial_state(model, drafter, cfg, seed=0):
    """The prefilled decode state of PROMPTS (what ``generate`` starts its loop from)."""
    b = prepare(model, drafter, PROMPTS, cfg)
    init = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
    args = (b.prompts, b.lengths, b.active, np.int32(seed))
    return init(model, drafter, *args, capacity=b.capacity, buffer=b.buffer)


def _stop_token(rows):
    """A token first appearing mid-way through row 0: stopping there ends the row mid-draft."""
    row = rows[0]
    for i in range(6, len(row)):
        if row[i] not in row[:i]:
            return row[i]
    raise AssertionError("no fresh token in row 0")


@pytest.mark.parametrize("verifier,k", CASES)
def test_greedy_speculative_equals_autoregressive(models, autoregressive, verifier, k):
    target, draft = models
    cfg = DecodeConfig(verifier, GREEDY, max_new_tokens=30)
    out = generate(
        target, PROMPTS, cfg, ModelDrafter(draft, num_paths=k, draft_len=3, sampling=GREEDY)
    )
    assert out.tokens == autoregressive
    hist = out.metrics.accepted_length_histogram
    assert hist[0] > 0 and hist[-1] > 0  # both rejections and whole accepted drafts occurred

    stop = _stop_token(autoregressive)  # EOS reached mid-draft
    cfg = DecodeConfig(verifier, GREEDY, max_new_tokens=30, stop_tokens=(stop,))
    ar = generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, 30, (stop,)))
    out = generate(
        target, PROMPTS, cfg, ModelDrafter(draft, num_paths=k, draft_len=3, sampling=GREEDY)
    )
    assert out.tokens == ar.tokens
    assert ar.tokens[0][-1] == stop and len(ar.tokens[0]) < 30


def test_a_drafter_with_a_nan_weight_at_temperature_0(models, autoregressive):
    """A NaN in the draft's weights (its argmax then proposes token V - 1 everywhere) leaves
    greedy output equal to autoregressive output (the program of the block case above)."""
    target, draft = models
    leaves, treedef = jax.tree.flatten(draft.state)
    leaves[0] = leaves[0].at[(0,) * leaves[0].ndim].set(jnp.nan)
    broken = PureModel(draft.graphdef, jax.tree.unflatten(treedef, leaves))
    cfg = DecodeConfig("block", GREEDY, max_new_tokens=30)
    out = generate(
        target, PROMPTS, cfg, ModelDrafter(broken, num_paths=1, draft_len=3, sampling=GREEDY)
    )
    assert out.tokens == autoregressive


def test_rows_accept_zero_and_all_in_the_same_step(models, autoregressive):
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, max_new_tokens=30)
    state = initial_state(target, drafter, cfg, seed=0)
    mixed = False
    while not bool(jnp.all(state.done)):
        state = jax.jit(step, static_argnames="config")(target, drafter, state, cfg)
        taus = set(np.asarray(state.stats.last_accepted).tolist())
        mixed |= {0, 3} <= taus
    assert mixed
    rows = [state.tokens[b, len(PROMPTS[b]) : state.lengths[b]].tolist() for b in range(3)]
    assert rows == autoregressive


@pytest.mark.parametrize("verifier", [pytest.param("token", marks=pytest.mark.slow), "block"])
def test_ngram_drafter_greedy_equals_autoregressive(models, autoregressive, verifier):
    target, _ = models
    out = generate(
        target, PROMPTS, DecodeConfig(verifier, GREEDY, 30), NgramDrafter(48, draft_len=4)
    )
    assert out.tokens == autoregressive
    assert out.metrics.block_efficiency > 1.0  # greedy text repeats: lookups hit
    hist = out.metrics.accepted_length_histogram
    assert hist[0] > 0 and sum(hist[1:]) > 0  # rejections and acceptances in one run


def test_ngram_tree_greedy_equals_autoregressive(models, autoregressive):
    """K = 3 n-gram paths (the three best distinct matches) verified as a tree by SpecInfer;
    refused at T > 0 and with verifiers built for i.i.d. paths."""
    target, _ = models
    drafter = NgramDrafter(48, draft_len=4, num_paths=3)
    out = generate(target, PROMPTS, DecodeConfig("specinfer", GREEDY, 30), drafter)
    assert out.tokens == autoregressive
    assert out.metrics.block_efficiency > 1.0
    hist = out.metrics.accepted_length_histogram
    assert hist[0] > 0 and sum(hist[1:]) > 0  # rejections and acceptances in one run
    with pytest.raises(ValueError, match="exact at temperature 0 only"):
        generate(target, PROMPTS, DecodeConfig("specinfer", SamplingParams(1.0), 30), drafter)
    for verifier in ("gbv", "spectr"):
        with pytest.raises(ValueError, match="use verifier=specinfer"):
            generate(target, PROMPTS, DecodeConfig(verifier, GREEDY, 30), drafter)


def test_ngram_tree_proposes_distinct_matches_best_first():
    #                    0  1  2  3  4  5  6  7  8  9 10
    tokens = jnp.array([[7, 1, 2, 3, 9, 2, 4, 1, 2, 5, 1, 2, 0, 0]], jnp.int32)
    draft, _ = NgramDrafter(16, draft_len=3, max_ngram=2, num_paths=4).propose(
        (), None, tokens, jnp.array([12])
    )
    # Suffix "1 2": 2-gram matches end before 3 and 9 (most recent first: 9 then 3); the 1-gram
    # "2" alone also matches before 6; nothing else.
    np.testing.assert_array_equal(draft.tokens[0, :, 0], [5, 3, 4, -1])
    np.testing.assert_array_equal(draft.num_draft[0], [3, 3, 3, 0])
    np.testing.assert_array_equal(draft.tokens[0, 0], [5, 1, 2])


def test_ngram_proposals_have_variable_length():
    tokens = jnp.array([[1, 2, 3, 4, 1, 2, 0, 0, 0], [5, 6, 7, 8, 9, 0, 0, 0, 0]], jnp.int32)
    draft, _ = NgramDrafter(16, draft_len=4, max_ngram=2).propose(
        (), None, tokens, jnp.array([6, 5])
    )
    np.testing.assert_array_equal(draft.num_draft, [[4], [0]])
    np.testing.assert_array_equal(draft.tokens[0, 0], [3, 4, 1, 2])
    np.testing.assert_array_equal(draft.tokens[1, 0], [-1, -1, -1, -1])
    np.testing.assert_array_equal(draft.probs[0, 0].argmax(-1), [3, 4, 1, 2])
    short, _ = NgramDrafter(16, draft_len=4).propose((), None, tokens, jnp.array([5, 5]))
    np.testing.assert_array_equal(short.tokens[0, 0], [2, 3, 4, 1])  # "1" matched at 0


def test_ngram_hint_counts_only_long_enough_matches():
    """The width controller's hint counts a proposal only where its match is ``hint_ngram``
    tokens long (at most ``max_ngram``); the proposal itself is made either way."""
    #                    0  1  2  3  4  5  6  7  8  9
    tokens = jnp.array([[4, 1, 2, 5, 6, 3, 1, 2, 0, 0], [7, 1, 2, 3, 8, 1, 2, 3, 0, 0]], jnp.int32)
    lengths = jnp.array([8, 8])  # row 0 ends "3 1 2": a 2-gram match; row 1 "1 2 3": a 3-gram
    drafter = NgramDrafter(16, draft_len=3)
    draft, _ = drafter.propose((), None, tokens, lengths)
    np.testing.assert_array_equal(draft.num_draft[:, 0], [3, 3])
    for hint_ngram, want in [(3, [0, 3]), (2, [3, 3]), (1, [3, 3])]:
        num, first = dataclasses.replace(drafter, hint_ngram=hint_ngram).hint(tokens, lengths)
        np.testing.assert_array_equal(num, want)
        np.testing.assert_array_equal(first, [5, 8])
    num, _ = NgramDrafter(16, draft_len=3, max_ngram=2).hint(tokens, lengths)  # (3 > max: 2)
    np.testing.assert_array_equal(num, [3, 3])
    with pytest.raises(ValueError, match="hint_ngram must be >= 1"):
        NgramDrafter(16, hint_ngram=0)


def test_same_seed_same_output_and_rows_independent(models):
    target, draft = models
    t1 = SamplingParams(1.0)
    cfg = DecodeConfig("gbv", t1, max_new_tokens=20)
    run = lambda prompts, seed: generate(
        target, prompts, cfg, ModelDrafter(draft, num_paths=2, draft_len=3, sampling=t1), seed
    )
    a = run(PROMPTS, 7).tokens
    assert a == run(PROMPTS, 7).tokens
    assert a != run(PROMPTS, 8).tokens
    other = run([PROMPTS[0], [40, 41], [3, 3, 3, 3, 3, 3, 3, 3, 3, 3]], 7).tokens
    assert other[0] == a[0]  # changing the other rows (and the padding) leaves row 0 alone


def test_stream_yields_the_same_tokens_as_generate(models, autoregressive):
    target, draft = models
    stream = Stream(
        target,
        PROMPTS,
        DecodeConfig("block", GREEDY, 30),
        ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY),
    )
    rows = [[] for _ in PROMPTS]
    for new in stream:
        for r, toks in zip(rows, new, strict=True):
            r.extend(toks)
    assert rows == autoregressive == stream.result.tokens


def test_max_new_tokens_and_metrics(models):
    """Rows stop at max_new_tokens and the metrics add up (on the block program of the tests
    above: one compilation, not one more for another length)."""
    target, draft = models
    out = generate(
        target,
        PROMPTS,
        DecodeConfig("block", GREEDY, 30),
        ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY),
    )
    assert [len(r) for r in out.tokens] == [30, 30, 30]
    m = out.metrics
    assert m.generated_tokens == 90
    assert sum(m.accepted_length_histogram) == m.steps
    assert m.block_efficiency == pytest.approx(1 + m.accepted_tokens / m.steps)
    assert 0 <= m.acceptance_rate <= 1 and len(m.per_position_acceptance) == 3


@pytest.mark.slow  # (tree attention == sequential scoring: tests/test_models.py)
def test_tree_drafting_matches_chain_scoring(models):
    """Each of K tree-grown paths gets exactly the draft laws of scoring that path alone."""
    _, draft = models
    t1 = SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=3, draft_len=4, sampling=t1)
    cfg = DecodeConfig("gbv", t1, 10)
    state = initial_state(draft, drafter, cfg, seed=3)
    propose = jax.jit(drafter.propose)
    out, _ = propose(state.draft_state, state.keys, state.tokens, state.lengths)
    forward = jax.jit(lambda seq: draft(seq).logits[0])  # no cache; causal, so padding is harmless
    for b, prompt in enumerate(PROMPTS):
        for k in range(3):
            seq = prompt + out.tokens[b, k].tolist()
            logits = forward(jnp.asarray([seq + [0] * (32 - len(seq))]))
            logits = logits[len(prompt) - 1 : len(prompt) + 3]
            want = sampling.probs_from_logits(logits, t1)
            np.testing.assert_allclose(out.probs[b, k], want, atol=2e-6)


@pytest.mark.slow  # (specinfer without replacement: exact and Monte-Carlo in test_verify_*)
def test_without_replacement_root_children_are_distinct(models):
    _, draft = models
    t1 = SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=4, draft_len=2, sampling=t1, replacement=False)
    cfg = DecodeConfig("specinfer", t1, 10)
    state = initial_state(draft, drafter, cfg, seed=3)
    out, _ = drafter.propose(state.draft_state, state.keys, state.tokens, state.lengths)
    for b in range(3):
        assert len(set(out.tokens[b, :, 0].tolist())) == 4


@pytest.mark.slow  # (the self-draft pair: tests/test_pairs.py)
def test_self_draft_is_the_first_layers(models):
    target, _ = models
    module = target.module
    draft = truncated(module, 1)
    assert draft.config.num_layers == 1 and draft.layers[0] is module.layers[0]
    g = SamplingParams(0.0)
    ar = generate(target, PROMPTS, DecodeConfig("autoregressive", g, 12))
    out = generate(
        target,
        PROMPTS,
        DecodeConfig("block", g, 12),
        ModelDrafter(PureModel.of(draft), num_paths=1, draft_len=2, sampling=g),
    )
    assert out.tokens == ar.tokens


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(verifier="nope"), "unknown verifier"),
        (dict(verifier="block", num_paths=2), "verifies one chain"),
        (dict(verifier="gbv", num_paths=2, replacement=False), "i.i.d."),
        (dict(verifier="greedy", sampling=SamplingParams(1.0)), "temperature 0 only"),
    ],
)
def test_bad_configurations_fail_clearly(models, kwargs, message):
    target, draft = models
    with pytest.raises(ValueError, match=message):
        shape = dict(num_paths=kwargs.pop("num_paths", 1), draft_len=2)
        drafter = ModelDrafter(
            draft, **shape, sampling=GREEDY, replacement=kwargs.pop("replacement", True)
        )
        generate(target, PROMPTS, DecodeConfig(**kwargs), drafter)


def test_drafter_knobs_are_keywords_and_replacement_is_the_drafters(models):
    """Every drafter takes its model (or V) positionally and its knobs by keyword, in one order;
    how sibling paths were drawn is the drafter's ``replacement`` alone (no DecodeConfig field),
    checked against the verifier before anything compiles."""
    target, draft = models
    for positional in (
        lambda: ModelDrafter(draft, GREEDY, 1, 3),
        lambda: NgramDrafter(16, 3),
        lambda: FeatureDrafter(draft, GREEDY),
        lambda: SSDDrafter(draft, SSDConfig(), GREEDY),
    ):
        with pytest.raises(TypeError, match="positional"):
            positional()
    last = {ModelDrafter: "coupled", NgramDrafter: "replacement", FeatureDrafter: "coupled"}
    for cls, final in last.items():
        first, *knobs = inspect.signature(cls).parameters.values()
        assert first.kind is first.POSITIONAL_OR_KEYWORD
        assert all(p.kind is p.KEYWORD_ONLY for p in knobs), cls
        names = [p.name for p in knobs]
        assert names[:2] == ["num_paths", "draft_len"] and names[-1] == final, cls
    assert "replacement" not in {f.name for f in dataclasses.fields(DecodeConfig)}
    with pytest.raises(TypeError, match="replacement"):
        DecodeConfig("specinfer", GREEDY, 8, replacement=False)
    wor = ModelDrafter(draft, num_paths=3, draft_len=2, sampling=GREEDY, replacement=False)
    assert dataclasses.replace(wor, draft_len=1).replacement is False  # what widths narrow
    prepare(target, wor, PROMPTS, DecodeConfig("specinfer", GREEDY, 8))  # accepted
    with pytest.raises(ValueError, match="set replacement=True on the drafter"):
        prepare(target, wor, PROMPTS, DecodeConfig("gbv", GREEDY, 8))


def test_bad_inputs_fail_clearly(models):
    target, draft = models
    cfg = DecodeConfig("block", GREEDY, 10)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=2, sampling=GREEDY)
    with pytest.raises(ValueError, match="exceed the model's max_seq_len"):
        generate(target, [[1] * 250], cfg, drafter)
    with pytest.raises(ValueError, match="empty"):
        generate(target, [[]], cfg, drafter)
    with pytest.raises(ValueError, match="outside"):
        generate(target, [[1, 99]], cfg, drafter)
    with pytest.raises(ValueError, match="share one tokenizer"):
        generate(target, [[1]], cfg, NgramDrafter(50, draft_len=2))
    with pytest.raises(ValueError, match="share one tokenizer"):
        other = PureModel.of(Decoder(tiny_config(vocab=50), rngs=nnx.Rngs(0)))
        generate(target, [[1]], cfg, ModelDrafter(other, num_paths=1, draft_len=2, sampling=GREEDY))
