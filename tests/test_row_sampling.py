"""Per-row sampling (``DecodeConfig.rows``): rows of one batch at different temperatures, top-k
and top-p each follow their own processed target law; temperature-0 rows stay greedy under every
verifier; a request's own values give the tokens a config of those values gives; a request's seed
reproduces ``generate`` of its prompt; a request's ``max_new_tokens`` ends it there; bad values
become error completions."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from specjax.decode import DecodeConfig, generate
from specjax.decode.batching import ContinuousBatch, Request
from specjax.decode.buckets import EXACT
from specjax.decode.loop import UNLIMITED, Run, outputs
from specjax.decode.programs import PROGRAMS
from specjax.drafters import ModelDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel
from specjax.row_sampling import RowSampling
from specjax.sampling import SamplingParams
from specjax.testing import pair, sharpened, tiny_config

NEW = 10
SLOW = pytest.mark.slow
PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]]


@pytest.fixture(scope="module")
def models():
    """A tiny target and a draft that mostly agrees with it (V = 48)."""
    return pair(vocab=48)


def decode_rows(target, drafter, config, prompts, params, seed=0):
    """The generation of ``prompts`` by the compiled decode program, row b sampling with
    ``params[b]`` (the prefilled state's per-row sampling replaced)."""
    config = dataclasses.replace(config, rows=True)
    run = Run.of(target, drafter, prompts, config, seed, None, EXACT)
    state = run.start()
    padded = list(params) + [config.sampling] * (state.batch - len(params))
    state = state.replace(sampling=jax.tree.map(jnp.asarray, RowSampling.of(padded)))
    state = run.decode(state, UNLIMITED)
    return outputs(jax.device_get(state.replace(target_cache=None, draft_state=None)), len(prompts))


# -- (a) each row follows its own law -------------------------------------------------------------

V = 8
PROMPT = [1, 2, 3, 1]
GROUPS = [
    SamplingParams(0.6, top_k=3),
    SamplingParams(1.4, top_p=0.7),
    SamplingParams(1.0, top_k=5, top_p=0.9),
]
PER_GROUP = 1500


def reference_law(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The processed law of ``logits [V]`` in NumPy (float64): temperature, top-k, top-p."""
    x = logits.astype(np.float64)
    x = (x - x.max()) / params.temperature
    if 0 < params.top_k < len(x):
        x = np.where(x < np.sort(x)[::-1][params.top_k - 1], -np.inf, x)
    p = np.exp(x - x.max())
    p /= p.sum()
    if params.top_p < 1.0:
        ordered = np.sort(p)[::-1]
        keep = int(np.sum(np.cumsum(ordered) - ordered < params.top_p))
        p = np.where(p >= ordered[keep - 1], p, 0.0)
        p /= p.sum()
    return p


def two_token_law(target: PureModel, params: SamplingParams) -> np.ndarray:
    """``[V * V]`` the law of the first two generated tokens after PROMPT."""
    seqs = np.array([[*PROMPT, a] for a in range(V)])
    logits = np.asarray(jax.jit(lambda m, x: m(x).logits)(target, jnp.asarray(seqs)))  # [V, T, V]
    first = reference_law(logits[0, len(PROMPT) - 1], params)
    second = np.stack([reference_law(logits[a, len(PROMPT)], params) for a in range(V)])
    return (first[:, None] * second).reshape(-1)


def chi_square_pvalue(pairs: np.ndarray, law: np.ndarray) -> float:
    counts = np.bincount(pairs, minlength=len(law)).astype(float)
    expected = law * len(pairs)
    assert np.all(counts[expected == 0] == 0)  # nothing outside the law's support
    small = expected < 5  # pooled
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return stats.chisquare(obs, exp).pvalue


def test_rows_at_different_params_follow_their_own_target_laws():
    """One batch, three groups of rows with their own temperature / top-k / top-p, a model draft
    verified by block verification: each group's first two tokens follow the target's law
    processed with that group's values (and not another group's)."""
    target = sharpened(Decoder(tiny_config(V, name="t"), rngs=nnx.Rngs(10)), 1.0)
    draft = sharpened(Decoder(tiny_config(V, num_layers=1, name="d"), rngs=nnx.Rngs(11)), 1.5)
    target, draft = PureModel.of(target), PureModel.of(draft)
    config = DecodeConfig("block", SamplingParams(), max_new_tokens=2)
    drafter = ModelDrafter(draft, draft_len=2, sampling=SamplingParams())
    params = [p for p in GROUPS for _ in range(PER_GROUP)]
    rows = decode_rows(target, drafter, config, [PROMPT] * len(params), params, seed=7)
    pairs = np.array([r[0] * V + r[1] for r in rows]).reshape(len(GROUPS), PER_GROUP)
    laws = [two_token_law(target, p) for p in GROUPS]
    for g in range(len(GROUPS)):
        assert chi_square_pvalue(pairs[g], laws[g]) > 1e-3, GROUPS[g]
    assert chi_square_pvalue(pairs[0], laws[1]) < 1e-6  # the test tells the groups apart


# -- (b) temperature-0 rows are greedy under every verifier ---------------------------------------

VERIFIERS = [
    ("block", 1),
    ("gumbel", 1),
    ("specinfer", 2),
    pytest.param("token", 1, marks=SLOW),
    pytest.param("spectr", 2, marks=SLOW),
    pytest.param("gbv", 2, marks=SLOW),
    pytest.param("autoregressive", 1, marks=SLOW),
]


@pytest.fixture(scope="module")
def greedy_tokens(models):
    target, _ = models
    config = DecodeConfig("autoregressive", SamplingParams(0.0), NEW)
    return generate(target, PROMPTS, config, buckets=EXACT).tokens


@pytest.mark.parametrize("verifier,k", VERIFIERS)
def test_temperature_0_rows_beside_sampled_rows_are_greedy(models, greedy_tokens, verifier, k):
    target, draft = models
    config = DecodeConfig(verifier, SamplingParams(1.0), NEW)
    drafter = None
    if verifier != "autoregressive":
        drafter = ModelDrafter(draft, num_paths=k, draft_len=3, sampling=SamplingParams())
    hot = SamplingParams(1.0)
    params = [SamplingParams(0.0), hot, SamplingParams(0.0, top_k=2), hot, SamplingParams(0.0)]
    rows = decode_rows(target, drafter, config, PROMPTS, params, seed=1)
    cold = [b for b, p in enumerate(params) if p.greedy]
    assert [rows[b] for b in cold] == [greedy_tokens[b] for b in cold]
    assert [rows[b] for b in (1, 3)] != [greedy_tokens[b] for b in (1, 3)]  # really sampled


# -- (c) per-request values == a config of those values -------------------------------------------

OWN = SamplingParams(0.7, top_k=6, top_p=0.9)
HOT = SamplingParams(1.5)  # the per-row runs' own values, not OWN


def run(engine: ContinuousBatch, requests) -> dict:
    return {c.id: c for c in engine.run(requests)}


def per_row_engine(models, verifier: str) -> ContinuousBatch:
    """A batch at HOT whose drafter draws at HOT too: its requests bring their own values (the
    per-row tests share its programs)."""
    target, draft = models
    drafter = ModelDrafter(draft, draft_len=3, sampling=HOT)
    config = DecodeConfig(verifier, HOT, NEW)
    return ContinuousBatch(target, drafter, config, slots=2, seed=5, refill=2)


@pytest.mark.parametrize("verifier", ["block", "gumbel", pytest.param("token", marks=SLOW)])
def test_a_request_with_its_own_sampling_decodes_as_a_config_of_it(models, verifier):
    """A request's own sampling gives the tokens of a static config of the same values (same
    run seed and id), beside a request at the run's own values; the drafter draws with the
    row's values too (its own sampling is another's)."""
    target, draft = models
    static = ContinuousBatch(
        target,
        ModelDrafter(draft, draft_len=3, sampling=OWN),
        DecodeConfig(verifier, OWN, NEW),
        slots=2,
        seed=5,
        refill=2,  # inserts of two: one insert program
    )
    expected = run(static, [Request(i, p) for i, p in enumerate(PROMPTS[:4])])
    mixed = [Request(i, p, sampling=OWN if i != 3 else None) for i, p in enumerate(PROMPTS[:4])]
    got = run(per_row_engine(models, verifier), mixed)
    for i in range(4):
        if i != 3:
            assert got[i].token_ids == expected[i].token_ids, i
    assert got[3].token_ids != expected[3].token_ids  # at HOT, not OWN


def test_rows_without_own_values_give_the_static_tokens(models):
    """``rows=True`` with every row at the config's values: the same tokens as the static
    program (the per-row laws are the static ones, bit for bit)."""
    target, draft = models
    drafter = ModelDrafter(draft, draft_len=3, sampling=SamplingParams())
    config = DecodeConfig("block", SamplingParams(1.0), NEW)  # (b)'s per-row program
    static = generate(target, PROMPTS, config, drafter, seed=2, buckets=EXACT).tokens
    rows = generate(
        target, PROMPTS, dataclasses.replace(config, rows=True), drafter, seed=2, buckets=EXACT
    )
    assert rows.tokens == static


# -- (d) a request's seed reproduces generate -----------------------------------------------------


@pytest.mark.parametrize("verifier", ["gumbel", "autoregressive"])
def test_a_seeded_request_reproduces_generate_with_that_seed(models, verifier):
    target, draft = models
    config = DecodeConfig(verifier, OWN, NEW)
    drafter = ModelDrafter(draft, draft_len=3, sampling=OWN) if verifier == "gumbel" else None
    engine = ContinuousBatch(target, drafter, config, slots=2, seed=5)
    requests = [Request(i, p, seed=100 + i) for i, p in enumerate(PROMPTS[:3])]
    requests.append(Request("unseeded", PROMPTS[0]))
    got = run(engine, requests)
    for i, prompt in enumerate(PROMPTS[:3]):
        alone = generate(target, [prompt], config, drafter, seed=100 + i).tokens[0]
        assert got[i].token_ids == alone, i
    # the run's seed and the id otherwise: not the seeded request's tokens
    assert got["unseeded"].token_ids != got[0].token_ids


# -- (e) a request's max_new_tokens ---------------------------------------------------------------


def test_a_request_stops_at_its_own_max_new_tokens_while_others_go_on(models):
    limits = [1, None, 4, 7]
    requests = [
        Request(i, p, sampling=OWN, max_new_tokens=m)
        for i, (p, m) in enumerate(zip(PROMPTS[:4], limits, strict=True))
    ]
    got = run(per_row_engine(models, "block"), requests)
    full = run(
        per_row_engine(models, "block"),
        [dataclasses.replace(r, max_new_tokens=None) for r in requests],
    )
    for i, limit in enumerate(limits):
        n = NEW if limit is None else limit
        assert len(full[i].token_ids) == NEW
        assert got[i].token_ids == full[i].token_ids[:n], i  # the same draws, cut there
        assert got[i].finish_reason == "length"


def test_one_prefill_program_serves_every_value(models):
    """Per-request values are traced: other temperatures, limits and seeds compile nothing."""

    def requests(t: float, m: int, s: int):
        return [
            Request(i, p, sampling={"temperature": t}, max_new_tokens=m, seed=s)
            for i, p in enumerate(PROMPTS[:2])
        ]

    run(per_row_engine(models, "block"), requests(0.3, 5, 1))
    before = PROGRAMS.compiled
    again = run(per_row_engine(models, "block"), requests(1.2, 3, 2))
    assert PROGRAMS.compiled == before
    assert all(len(c.token_ids) == 3 for c in again.values())


# -- (f) bad values -------------------------------------------------------------------------------


def test_bad_per_request_values_become_error_completions(models):
    target, draft = models
    engine = ContinuousBatch(
        target,
        ModelDrafter(draft, draft_len=3, sampling=OWN),
        DecodeConfig("block", OWN, NEW),
        slots=2,
    )
    bad = {
        "t": ({"temperature": -0.5}, None, None, "temperature must be >= 0"),
        "p": ({"top_p": 1.5}, None, None, "top_p must be in (0, 1]"),
        "p0": ({"top_p": 0.0}, None, None, "top_p must be in (0, 1]"),
        "k": ({"top_k": -1}, None, None, "top_k must be >= 0"),
        "key": ({"temp": 1.0}, None, None, "unknown sampling keys"),
        "m0": (None, 0, None, "max_new_tokens must be an int in 1 .. 10"),
        "big": (None, NEW + 1, None, "raise the run's"),
        "seed": (None, None, 2**40, "does not fit"),
    }
    requests = [
        Request(i, [1, 2], sampling=s, max_new_tokens=m, seed=z) for i, (s, m, z, _) in bad.items()
    ]
    got = run(engine, requests)
    for i, (*_, message) in bad.items():
        assert got[i].finish_reason == "error" and message in got[i].error, (i, got[i].error)
    fields = [engine.value_problem(r)[0] for r in requests]  # (a server's error names it)
    named = ["temperature", "top_p", "top_p", "top_k", "temp", "max_new_tokens"]
    assert fields == [*named, "max_new_tokens", "seed"]


def test_sampled_requests_are_refused_where_only_temperature_0_is_exact(models):
    target, draft = models
    greedy = ContinuousBatch(
        target,
        ModelDrafter(draft, draft_len=3, sampling=SamplingParams(0.0)),
        DecodeConfig("greedy", SamplingParams(0.0), NEW),
    )
    assert "verifier 'greedy'" in greedy.problem(Request(0, [1], sampling={"temperature": 1.0}))
    assert greedy.problem(Request(0, [1], sampling={"top_k": 3})) == ""  # still temperature 0
    widths = ContinuousBatch(
        target,
        ModelDrafter(draft, draft_len=3, sampling=SamplingParams(0.0)),
        DecodeConfig("block", SamplingParams(0.0), NEW, widths=(0, 3)),
    )
    assert "adaptive widths" in widths.problem(Request(0, [1], sampling=SamplingParams(0.8)))
