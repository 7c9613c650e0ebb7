"""The draft width chosen per step (``DecodeConfig.widths``): greedy output == autoregressive
output with widths drawn at random per step and with the controller on (every verifier, every
drafter, a batch of mixed lengths, a stop token mid-draft); a policy that never drafts emits the
autoregressive sample; the sequence law at temperature 1 with random widths, and the same test
catching a planted step that picks its width per row after its verdict; drafters' state kept in
step over skipped steps; the decode program's idle runs and streaming take the widths stepping
by hand and ``generate`` take; no KV-cache copies around the branches in the compiled program.
(The policies alone: tests/test_width_policy.py; their costs: tests/test_width_costs.py.)"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import sampling
from specjax.decode import DecodeConfig, Stream, generate, programs
from specjax.decode import widths as W
from specjax.decode.adaptive import choose_width, skip_step
from specjax.decode.seams import (
    PROGRAMS,
    compile_generation,
    decode_program,
    outputs,
    prefill_program,
    prepare,
    step,
)
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.drafters.feature import FeatureDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel, prefill
from specjax.testing import pair, sharpened, tiny_config
from tests.test_decode_lossless import NEW, PROMPT, ROWS, chi_square_pvalue, exact_joint
from tests.test_decode_lossless import pair as lossless_pair  # noqa: F401 (a fixture)
from tests.test_feature_drafter import PROMPTS as FEATURE_PROMPTS
from tests.test_feature_drafter import random_head

GREEDY = sampling.SamplingParams(temperature=0.0)
PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [12], [3, 3, 3, 3, 3, 3]]
NEW_TOKENS = 30


@pytest.fixture(scope="module")
def models():
    return pair(sigma=0.05)


@pytest.fixture(scope="module")
def autoregressive(models):
    target, _ = models
    return generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, NEW_TOKENS)).tokens


def _stop_token(rows):
    """A token first appearing mid-way through row 0 (a stop there ends it mid-draft)."""
    row = rows[0]
    return next(row[i] for i in range(6, len(row)) if row[i] not in row[:i])


SLOW = pytest.mark.slow
CASES = [  # (verifier, K, drafter); the default tier keeps one chain of a model drafter
    ("block", 1, "model"),
    pytest.param("gbv", 3, "model", marks=SLOW),
    pytest.param("block", 1, "ngram", marks=SLOW),
    pytest.param("greedy", 1, "model", marks=SLOW),
    pytest.param("token", 1, "model", marks=SLOW),
    pytest.param("specinfer", 3, "model", marks=SLOW),
    pytest.param("spectr", 3, "model", marks=SLOW),
    pytest.param("specinfer", 2, "ngram", marks=SLOW),
]


def _drafter(kind, models, k, l_len=3):
    target, draft = models
    if kind == "ngram":
        return NgramDrafter(target.config.vocab_size, num_paths=k, draft_len=l_len)
    return ModelDrafter(draft, num_paths=k, draft_len=l_len, sampling=GREEDY)


@pytest.mark.parametrize("verifier,k,kind", CASES)
def test_random_widths_greedy_equals_autoregressive(models, autoregressive, verifier, k, kind):
    target, _ = models
    drafter = _drafter(kind, models, k)
    cfg = DecodeConfig(verifier, GREEDY, NEW_TOKENS, widths=(0, 1, 3), width_policy="random")
    out = generate(target, PROMPTS, cfg, drafter, seed=3)
    assert out.tokens == autoregressive
    assert all(n > 0 for n in out.metrics.width_steps.values())  # every width was used
    if kind == "model":  # rows accepting nothing and everything (mixed accept lengths)
        hist = out.metrics.accepted_length_histogram
        assert hist[0] > 0 and hist[3] > 0

    # A stop token mid-draft: greedy decoding with it is the greedy rows cut after its first
    # occurrence (tests/test_decode.py checks autoregressive decoding's own stop).
    stop = _stop_token(autoregressive)
    ar = [row[: row.index(stop) + 1] if stop in row else row for row in autoregressive]
    cfg = DecodeConfig(
        verifier, GREEDY, NEW_TOKENS, (stop,), widths=(0, 1, 3), width_policy="random"
    )
    assert generate(target, PROMPTS, cfg, drafter, seed=4).tokens == ar


@SLOW  # (the controller's greedy tokens, measured costs: tests/test_width_costs.py)
@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_controller_greedy_equals_autoregressive(models, autoregressive, kind):
    target, _ = models
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 2, 3))
    out = generate(target, PROMPTS, cfg, _drafter(kind, models, 1))
    assert out.tokens == autoregressive
    assert sum(out.metrics.width_steps.values()) == out.metrics.target_forwards


@pytest.mark.parametrize(
    "verifier,k", [pytest.param("block", 1, marks=SLOW), pytest.param("gbv", 3, marks=SLOW)]
)
def test_feature_drafter_random_widths_greedy_equals_autoregressive(verifier, k):
    target = PureModel.of(sharpened(Decoder(tiny_config(12, name="t"), rngs=nnx.Rngs(3)), 3.0))
    ar = generate(target, FEATURE_PROMPTS, DecodeConfig("autoregressive", GREEDY, 24)).tokens
    drafter = FeatureDrafter(random_head(target, 8), num_paths=k, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig(verifier, GREEDY, 24, widths=(0, 1, 3), width_policy="random")
    out = generate(target, FEATURE_PROMPTS, cfg, drafter, seed=5)
    assert out.tokens == ar
    assert all(n > 0 for n in out.metrics.width_steps.values())


@SLOW  # ~12 s; the model drafter's twin and the idle-run test stay in the default tier
def test_feature_drafter_state_stays_in_step_over_skipped_steps():
    """Runs of width-0 steps long enough to fill the pending slots (L + 1 = 4) and then full
    steps: between steps the head's cache plus its pending pairs cover the committed tokens,
    each pending pair carries the target's teacher-forced features of the position before it,
    and the tokens are the autoregressive ones."""
    target = PureModel.of(sharpened(Decoder(tiny_config(12, name="t"), rngs=nnx.Rngs(3)), 3.0))
    ar = generate(target, FEATURE_PROMPTS, DecodeConfig("autoregressive", GREEDY, 24)).tokens
    drafter = FeatureDrafter(random_head(target, 8), num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, 24, widths=(0, 3))
    state = initial_state(target, drafter, cfg, FEATURE_PROMPTS)
    one = jax.jit(step, static_argnames=("config",))
    forced = jax.jit(lambda m, x: m(x, features=drafter.feature_layers).features)
    costs = jnp.ones((2,), jnp.float32)
    for force in [0] * 6 + [1, 1] + [0] * 5 + [1]:
        state = one(target, drafter, state, cfg, W.WidthInputs(costs, jnp.int32(force)))
        ds = state.draft_state
        seen, n_p = np.asarray(ds.cache.lengths), np.asarray(ds.num_pending)
        lengths, done = np.asarray(state.lengths), np.asarray(state.done)
        hidden = np.asarray(forced(target, state.tokens))  # [B, S, A, D]
        for r in range(len(FEATURE_PROMPTS)):
            if done[r]:
                continue
            assert seen[r] + n_p[r] == lengths[r]
            for i in range(n_p[r]):
                pos = seen[r] + i - 1  # the first pair of a sequence has no features
                want = np.zeros_like(ds.pending[r, i]) if pos < 0 else hidden[r, pos]
                np.testing.assert_allclose(ds.pending[r, i], want, atol=2e-5)
    for r, prompt in enumerate(FEATURE_PROMPTS):
        row = np.asarray(state.tokens[r, len(prompt) : state.lengths[r]]).tolist()
        assert row == ar[r][: len(row)]


def initial_state(target, drafter, cfg, prompts, seed: int = 0):
    b = prepare(target, drafter, prompts, cfg)
    init = jax.jit(prefill_program, static_argnames=("capacity", "buffer", "widths"))
    args = (b.prompts, b.lengths, b.active, np.int32(seed))
    return init(target, drafter, *args, capacity=b.capacity, buffer=b.buffer, widths=cfg.widths)


@pytest.mark.slow  # (skipped steps of a model drafter: the idle-runs test's tokens)
def test_model_drafter_cache_stays_in_step_over_skipped_steps(models):
    """After seven width-0 steps and one full-width step, the draft cache holds exactly what a
    fresh prefill of the committed tokens holds (the skipped tokens were caught up)."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))
    state = initial_state(target, drafter, cfg, PROMPTS)
    one = jax.jit(step, static_argnames=("config",))
    costs = jnp.ones((2,), jnp.float32)
    for force in [0] * 7 + [1]:
        state = one(target, drafter, state, cfg, W.WidthInputs(costs, jnp.int32(force)))
    cache = state.draft_state
    lengths = np.asarray(state.lengths)
    seen = np.asarray(cache.lengths)
    assert np.all(seen >= lengths - 2) and np.all(seen < lengths)
    fresh = prefill(draft, state.tokens[:, : int(lengths.max())], state.lengths, cache.capacity)
    for r in range(len(PROMPTS)):
        np.testing.assert_allclose(
            cache.k[:, r, : seen[r]], fresh.k[:, r, : seen[r]], atol=1e-5, rtol=1e-5
        )


def test_idle_runs_take_the_widths_stepping_by_hand_takes(models):
    """The decode program runs a model drafter's width-0 steps as plain one-token steps, booked
    once per run (``adaptive.idle_quota`` / ``book_idle``); stepping by hand decides at every
    step. Both take the same widths (the probes included), draw the same tokens at T = 1 and
    leave the controller alike, also when the program stops mid-run and resumes. Where no draft
    could pay, every step is width 0 (one run to the end), and the tokens are the
    autoregressive sample of the seed. (The costs are runtime inputs: one compiled program.)"""
    target, draft = models
    params = sampling.SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    cfg = DecodeConfig("block", params, NEW_TOKENS, widths=(0, 1, 3))
    program = jax.jit(decode_program, static_argnames=("config",))
    one = jax.jit(step, static_argnames=("config",))
    choose = jax.jit(choose_width, static_argnames=("config",))
    baseline = DecodeConfig("autoregressive", params, NEW_TOKENS)
    for costs in [(1.0, 1.55, 9.0), (1.0, 9.0, 9.0)]:  # probes draft; no probe could pay
        inputs = W.WidthInputs(jnp.asarray(costs, jnp.float32), jnp.int32(W.AUTO))
        start = initial_state(target, drafter, cfg, PROMPTS)
        state, steps = program(target, drafter, start, 13, None, inputs, config=cfg)
        state, more = program(target, drafter, state, 1000, None, inputs, config=cfg)
        assert bool(jnp.all(state.done))
        state, none = program(target, drafter, state, 1000, None, inputs, config=cfg)
        assert int(none) == 0  # a call on a finished state changes nothing
        hand = initial_state(target, drafter, cfg, PROMPTS)
        for _ in range(int(steps) + int(more)):
            hand = one(target, drafter, hand, cfg, inputs)
        _, hand = choose(drafter, hand, cfg, inputs)
        np.testing.assert_array_equal(state.tokens, hand.tokens)
        for field in ("accept", "seen", "idle", "wait", "steps", "last", "first", "next"):
            got, want = getattr(state.control, field), getattr(hand.control, field)
            np.testing.assert_array_equal(got, want, err_msg=f"{field} at costs {costs}")
        taken = np.asarray(state.control.steps)
        if costs[1] < 2:
            assert taken[1] >= 1 and taken[0] >= 10, taken  # idle runs and probes
        else:
            assert taken.tolist() == [NEW_TOKENS, 0, 0], taken
            sample = generate(target, PROMPTS, baseline, seed=0).tokens
            assert outputs(state, len(PROMPTS)) == sample


@SLOW
def test_streaming_takes_the_widths_generate_takes(models):
    """At T = 1 with the controller on (costs pinned), streaming (one decode call per step) draws
    the sample ``generate`` (one call) draws: the width chosen after a call's last step is the
    next call's first (``WidthControl.next``)."""
    target, draft = models
    params = sampling.SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    cfg = DecodeConfig("block", params, NEW_TOKENS, widths=(0, 1, 3), width_costs=(1.0, 1.4, 2.0))
    whole = generate(target, PROMPTS, cfg, drafter, seed=11)
    stream = Stream(target, PROMPTS, cfg, drafter, seed=11)
    for _ in stream:
        pass
    assert stream.result.tokens == whole.tokens
    assert stream.result.metrics.width_steps == whole.metrics.width_steps
    assert len(set(stream.widths_taken)) > 1


@SLOW  # (the decode program's tokens where no draft could pay: the idle-runs test)
@pytest.mark.parametrize(
    "policy,costs",
    [
        ("auto", (1.0, 9.0, 9.0)),  # no draft could pay: no probe either
        (W.Fixed(0), ()),  # a policy instance that keeps width 0
    ],
)
def test_a_generation_whose_policy_never_drafts_emits_the_autoregressive_sample(
    models, policy, costs
):
    """Every step at width 0 is a genuine one-token target step: at T = 1 ``generate`` and
    ``Stream`` draw the autoregressive program's tokens for the seed, and report every step at
    width 0 and nothing proposed."""
    target, draft = models
    params = sampling.SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    cfg = DecodeConfig(
        "block", params, NEW_TOKENS, widths=(0, 1, 3), width_policy=policy, width_costs=costs
    )
    out = generate(target, PROMPTS, cfg, drafter, seed=5)
    baseline = generate(target, PROMPTS, DecodeConfig("autoregressive", params, NEW_TOKENS), seed=5)
    assert out.tokens == baseline.tokens
    assert out.metrics.width_steps == {0: NEW_TOKENS, 1: 0, 3: 0}
    assert out.metrics.accepted_length_histogram == [NEW_TOKENS * len(PROMPTS), 0, 0, 0]
    assert out.metrics.position_proposed == [0, 0, 0]
    stream = Stream(target, PROMPTS, cfg, drafter, seed=5)
    streamed = [[] for _ in PROMPTS]
    for new in stream:
        for row, ids in zip(streamed, new, strict=True):
            row.extend(ids)
    assert streamed == out.tokens and stream.widths_taken == [0] * NEW_TOKENS
    assert stream.result.metrics.width_steps == out.metrics.width_steps


@SLOW  # 20,000 rows of Monte-Carlo; greedy equality with random widths is in the default tier
def test_sequence_law_at_temperature_one_with_random_widths(lossless_pair):  # noqa: F811
    target, draft = lossless_pair
    params = sampling.SamplingParams(1.0)
    cfg = DecodeConfig("block", params, NEW, widths=(0, 1, 2), width_policy="random")
    out = generate(
        target,
        [PROMPT] * ROWS,
        cfg,
        ModelDrafter(draft, num_paths=1, draft_len=2, sampling=params),
        seed=7,
    )
    assert out.metrics.accepted_tokens > 0.1 * ROWS
    assert chi_square_pvalue(out.tokens, exact_joint(target, params)) > 1e-3


def _rows(mask, a, b):
    """Row-wise select between two decode states (batch axis 1 for KV tensors)."""

    def pick(x, y):
        axis = 1 if x.ndim == 5 else 0  # [N, B, S, G, E] caches
        m = mask.reshape((1,) * axis + (-1,) + (1,) * (x.ndim - axis - 1))
        return jnp.where(m, x, y)

    return jax.tree.map(pick, a, b)


@SLOW
def test_a_width_chosen_per_row_after_the_verdict_is_caught(lossless_pair, monkeypatch):  # noqa: F811
    """Planted bug: the decode program's drafting step decides per row after its verdict, keeping
    the speculative step only where its draft was accepted and taking a one-token step instead
    elsewhere. It emits only accepted drafts or fresh target samples, which biases the law; the
    sequence-law test must reject it. (A real policy cannot do this: ``WidthPolicy.choose``
    fixes one width before the step drafts, and ``observe`` sees its verdicts after it.)"""
    target, draft = lossless_pair
    params = sampling.SamplingParams(1.0)
    exact_step = programs.width_step

    def peeking(target, drafter, state, config, index):
        spec = exact_step(target, drafter, state, config, index)
        if config.widths[index] == 0:
            return spec
        plain = skip_step(target, drafter, state, config).replace(keys=spec.keys, control=None)
        kept = _rows(spec.stats.last_accepted > 0, spec.replace(control=None), plain)
        return kept.replace(control=spec.control)

    monkeypatch.setattr(programs, "width_step", peeking)
    PROGRAMS.clear()
    try:
        cfg = DecodeConfig("block", params, NEW, widths=(0, 2), width_policy="fixed")
        out = generate(
            target,
            [PROMPT] * ROWS,
            cfg,
            ModelDrafter(draft, num_paths=1, draft_len=2, sampling=params),
            seed=8,
        )
    finally:
        PROGRAMS.clear()
    assert out.metrics.width_steps == {0: 0, 2: out.metrics.target_forwards}
    assert chi_square_pvalue(out.tokens, exact_joint(target, params)) < 1e-6


def test_no_cache_copies_around_the_branches(models):
    """The compiled adaptive decode program updates the donated KV caches in place: no copy of a
    cache-sized buffer anywhere in it. (A ``lax.switch`` over the widths made XLA copy both
    caches in and out of its branches; the program runs one inner loop per width instead, and
    a run of width-0 steps, whatever the policy: the random one here, the program the first
    test compiled.)"""
    target, draft = models
    drafter = _drafter("model", models, 1)
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 1, 3), width_policy="random")
    _, decode = compile_generation(target, PROMPTS, cfg, drafter)
    hlo = decode.as_text()
    b = prepare(target, drafter, PROMPTS, cfg)
    shapes = set()
    for model in (target, draft):
        c = model.config
        dims = (c.num_layers, b.prompts.shape[0], b.capacity, c.num_kv_heads, c.head_dim)
        shapes.add(",".join(map(str, dims)))
    assert hlo.count(" while(") >= 2 + len(cfg.widths)  # decode, outer and per-width loops
    copies = [
        line
        for line in hlo.splitlines()
        if re.search(r"= \w+\[([\d,]+)\]\{[^}]*\} copy\(", line)
        and re.search(r"\[([\d,]+)\]", line.split("=")[1]).group(1) in shapes
    ]
    assert not copies, copies[:3]
