"""Exact tests of the NumPy reference laws (specjax.verify.reference).

Losslessness is checked by exact enumeration (ALGORITHMS §0.4): every draft outcome x every
verifier outcome, completed with target probabilities, must reproduce the target's joint law of
length-(L+1) strings. Golden values come from ALGORITHMS §3 and §4.6.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from specjax.verify import reference as ref

try:  # pytest's default rootdir-relative import mode puts tests/ on sys.path
    import enumeration as en
except ImportError:  # tests/ imported as a package
    from tests import enumeration as en

TOL = 1e-12

VARIANTS = {
    "dirichlet": {},
    "one_hot_p": {"one_hot_p": True},
    "p_equals_q": {"p_equals_q": True},
    "q_zeros": {"q_zeros": 1},
    "p_zeros": {"p_zeros": 1},
    "one_hot_q": {"q_zeros": -1},  # -1: V - 1 zeros (deterministic drafts)
}

# (V, L, K): every V in {2, 3, 4}, L in {1, 2, 3} and K in {1, 2, 3} appears, sizes kept small.
MULTI_SIZES = [(2, 3, 3), (3, 2, 3), (4, 1, 3), (3, 3, 2), (4, 2, 2), (2, 2, 1), (3, 1, 2)]
CHAIN_SIZES = list(itertools.product((2, 3, 4), (1, 2, 3)))

# Multi-path verifiers with the draft scheme they are exact for.
MULTI_LAWS = {
    "specinfer_iid": ("specinfer", "iid", {}),
    "specinfer_wor": ("specinfer", "wor", {"replacement": False}),
    # The distinct tokens of i.i.d. siblings, in order of first appearance, are a draw without
    # replacement, so RRS without replacement (with its deduplication) is exact on i.i.d. paths.
    "specinfer_wor_on_iid": ("specinfer", "iid", {"replacement": False}),
    "spectr_iid": ("spectr", "iid", {}),
    "gbv_iid": ("gbv", "iid", {}),
}


def _model(vocab: int, depth: int, variant: str, seed: int) -> en.Model:
    options = dict(VARIANTS[variant])
    if options.get("q_zeros") == -1:
        options["q_zeros"] = vocab - 1
    rng = np.random.default_rng([seed, vocab, depth, list(VARIANTS).index(variant)])
    return en.random_model(rng, vocab, depth, **options)


def _root_support(model: en.Model) -> int:
    """Number of tokens of positive draft probability at the root."""
    return int(np.count_nonzero(model.q_table[0][0] > 0))


def _lossless_error(model, law_fn, scheme, num_paths, length, num_draft=None, **kwargs) -> float:
    emitted = en.emitted_law(model, law_fn, scheme, num_paths, length, num_draft, **kwargs)
    return en.max_abs_error(emitted, en.target_joint(model, length + 1))


def _assert_law_close(law_a: ref.Law, law_b: ref.Law, tol: float = TOL) -> None:
    keys = set(law_a) | set(law_b)
    err = max(abs(law_a.get(k, 0.0) - law_b.get(k, 0.0)) for k in keys)
    assert err <= tol, (law_a, law_b)


# --------------------------------------------------------------------------------------------
# Losslessness by exact enumeration.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize(("vocab", "length"), CHAIN_SIZES)
@pytest.mark.parametrize("name", ["token", "block"])
def test_chain_lossless(name, vocab, length, variant):
    model = _model(vocab, length, variant, seed=1)
    assert _lossless_error(model, name, "chain", 1, length) <= TOL


@pytest.mark.parametrize(("vocab", "length"), CHAIN_SIZES)
@pytest.mark.parametrize("q_variant", ["dirichlet", "q_zeros", "one_hot_q"])
def test_greedy_lossless_at_temperature_zero(vocab, length, q_variant):
    options = {"q_zeros": {"dirichlet": 0, "q_zeros": 1, "one_hot_q": vocab - 1}[q_variant]}
    model = en.random_model(
        np.random.default_rng([2, vocab, length]), vocab, length, one_hot_p=True, **options
    )
    assert _lossless_error(model, "greedy", "chain", 1, length) <= TOL


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize(("vocab", "length", "num_paths"), MULTI_SIZES)
@pytest.mark.parametrize("case", list(MULTI_LAWS))
def test_multi_path_lossless(case, vocab, length, num_paths, variant):
    name, scheme, kwargs = MULTI_LAWS[case]
    model = _model(vocab, length, variant, seed=3)
    if scheme == "wor":
        if _root_support(model) < num_paths:
            pytest.skip("siblings without replacement need K <= |support(q)|")
    assert _lossless_error(model, name, scheme, num_paths, length, **kwargs) <= TOL


@pytest.mark.parametrize(
    ("vocab", "length", "num_draft"), [(3, 3, 0), (3, 3, 1), (2, 3, 2), (4, 2, 1)]
)
@pytest.mark.parametrize("variant", ["dirichlet", "q_zeros", "p_zeros", "one_hot_p"])
def test_num_draft_lossless(vocab, length, num_draft, variant):
    model = _model(vocab, length, variant, seed=4)
    for name in ("token", "block"):
        assert _lossless_error(model, name, "chain", 1, length, num_draft) <= TOL, name
    if variant == "one_hot_p":
        assert _lossless_error(model, "greedy", "chain", 1, length, num_draft) <= TOL
    num_paths = 2
    for name, scheme, kwargs in MULTI_LAWS.values():
        if scheme == "wor" and _root_support(model) < num_paths:
            continue
        error = _lossless_error(model, name, scheme, num_paths, length, num_draft, **kwargs)
        assert error <= TOL, name


@pytest.mark.parametrize(("vocab", "length"), [(3, 2), (4, 2), (2, 2)])
@pytest.mark.parametrize("variant", ["dirichlet", "q_zeros", "one_hot_p", "p_zeros"])
def test_wor_tree_lossless(vocab, length, variant):
    """RRS without replacement on a 2 x 2 tree whose siblings are drawn without replacement."""
    model = _model(vocab, length, variant, seed=5)
    supports = [np.count_nonzero(row > 0) for table in model.q_table[:2] for row in table]
    if min(supports) < 2:
        pytest.skip("siblings without replacement need two tokens of positive draft probability")
    error = _lossless_error(model, "specinfer", "wor_tree", 4, length, replacement=False)
    assert error <= TOL


def test_enumeration_detects_broken_verifiers():
    """The harness must flag verifiers that are not exact (guards against a vacuous harness)."""
    model = en.context_independent((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4), 2)
    # Verifiers for i.i.d. siblings applied to siblings drawn without replacement are biased.
    assert _lossless_error(model, "specinfer", "wor", 2, 2, replacement=True) > 1e-3
    assert _lossless_error(model, "spectr", "wor", 2, 2) > 1e-3

    def first_failure_block(draft_tokens, draft_probs, target_probs, num_draft=None):
        """Block verification with the wrong "first failure stops" rule."""
        w, h = ref.block_weights_and_stops(draft_tokens, draft_probs, target_probs, num_draft)
        law, reach, n = {}, 1.0, len(h) - 1
        for i in range(1, n + 1):
            dist = np.maximum(w[i - 1] * target_probs[i - 1] - draft_probs[i - 1], 0.0)
            dist = dist / dist.sum() if dist.sum() > 0 else target_probs[i - 1]
            ref.add_outcome(law, i - 1, dist, 0, reach * (1 - h[i]))
            reach *= h[i]
        ref.add_outcome(law, n, target_probs[n], 0, reach)
        return law

    assert _lossless_error(en.bv_paper_model(2), first_failure_block, "chain", 1, 2) > 1e-3


# --------------------------------------------------------------------------------------------
# Golden values.
# --------------------------------------------------------------------------------------------

BV_TABLE = {  # L: (token E[tau], BV E[tau]), ALGORITHMS §3
    1: (Fraction(2, 3), Fraction(2, 3)),
    2: (Fraction(10, 9), Fraction(11, 9)),
    3: (Fraction(38, 27), Fraction(5, 3)),
    4: (Fraction(130, 81), Fraction(166, 81)),
    5: (Fraction(422, 243), Fraction(64, 27)),
}


@pytest.mark.parametrize("length", list(BV_TABLE))
def test_bv_paper_table(length):
    model = en.bv_paper_model(length)
    token, block = BV_TABLE[length]
    assert abs(en.expected_accepted_tokens(model, "token", "chain", 1, length) - token) <= TOL
    assert abs(en.expected_accepted_tokens(model, "block", "chain", 1, length) - block) <= TOL
    assert abs(en.block_efficiency(model, "block", "chain", 1, length) - (1 + block)) <= TOL
    for name in ("token", "block"):
        assert _lossless_error(model, name, "chain", 1, length) <= TOL


def test_context_dependent_example():
    model = en.context_dependent_example()
    token = en.expected_accepted_tokens(model, "token", "chain", 1, 2)
    block = en.expected_accepted_tokens(model, "block", "chain", 1, 2)
    assert abs(token - Fraction(13, 10)) <= TOL
    assert abs(block - Fraction(57, 40)) <= TOL
    for name in ("token", "block"):
        assert _lossless_error(model, name, "chain", 1, 2) <= TOL


# ALGORITHMS §4.6: p, q, k, 1-TV, RRS w/, k-SEQ w/, rho*, RRS w/o (4 printed decimals).
SINGLE_STEP_TABLE = [
    ((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4), 2, 0.6000, 0.7200, 0.7500, 1.5000, 0.7643),
    ((0.6, 0.2, 0.1, 0.1), (0.25,) * 4, 2, 0.6500, 0.7375, 0.7699, 1.4797, 0.7667),
    ((0.6, 0.2, 0.1, 0.1), (0.25,) * 4, 3, 0.6500, 0.8031, 0.8521, 1.8085, 0.8833),
    ((0.5, 0.3, 0.2), (0.2, 0.3, 0.5), 2, 0.7000, 0.7600, 0.7914, 1.4568, 0.8200),
]


@pytest.mark.parametrize("row", SINGLE_STEP_TABLE)
def test_single_step_table(row):
    p, q, k, one_minus_tv, rrs, kseq, rho, rrs_wor = row
    model = en.context_independent(p, q, 1)
    tol = 5e-5
    assert abs(en.expected_accepted_tokens(model, "token", "chain", 1, 1) - one_minus_tv) <= tol
    assert abs(en.expected_accepted_tokens(model, "specinfer", "iid", k, 1) - rrs) <= tol
    assert abs(en.expected_accepted_tokens(model, "spectr", "iid", k, 1) - kseq) <= tol
    assert abs(ref.spectr_rho(np.array(p), np.array(q), k) - rho) <= tol
    wor = en.expected_accepted_tokens(model, "specinfer", "wor", k, 1, replacement=False)
    assert abs(wor - rrs_wor) <= tol


# --------------------------------------------------------------------------------------------
# Invariants.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_block_never_worse_than_token(seed):
    rng = np.random.default_rng([7, seed])
    vocab, length = (3, 3) if seed % 2 else (4, 2)
    model = en.random_model(rng, vocab, length, alpha=0.5 + seed % 3, q_zeros=seed % 2)
    token = en.expected_accepted_tokens(model, "token", "chain", 1, length)
    block = en.expected_accepted_tokens(model, "block", "chain", 1, length)
    assert block >= token - TOL


def _multi_path_greedy(tokens, target_probs, num_draft):
    """Temperature-0 multi-path walk: follow the paths matching the target argmax."""
    paths, length = tokens.shape
    alive = list(range(paths))
    for d in range(length):
        best = int(np.argmax(target_probs[alive[0], d]))
        matches = [j for j in alive if d < num_draft[j] and tokens[j, d] == best]
        if not matches:
            return (d, best, alive[0])
        alive = matches
    return (length, int(np.argmax(target_probs[alive[0], length])), alive[0])


def _emitted(tokens, law):
    """Law of emitted strings ``x_1..x_tau, Y`` of one multi-path verdict."""
    out = {}
    for (tau, nxt, path), prob in law.items():
        key = (*tokens[path, :tau].tolist(), nxt)
        out[key] = out.get(key, 0.0) + prob
    return out


@pytest.mark.parametrize("q_zeros", [0, 1])
@pytest.mark.parametrize(("vocab", "length", "num_draft"), [(3, 2, 2), (2, 3, 3), (3, 3, 2)])
def test_temperature_zero_equals_greedy(vocab, length, num_draft, q_zeros):
    model = en.random_model(
        np.random.default_rng([8, vocab, length, q_zeros]),
        vocab,
        length,
        one_hot_p=True,
        q_zeros=q_zeros,
    )
    for _, tokens, draft_probs, target_probs in en.enumerate_drafts(
        model, "chain", 1, length, num_draft
    ):
        greedy = ref.greedy_law(tokens, draft_probs, target_probs, num_draft)
        for name in ("token", "block"):
            _assert_law_close(ref.law(name, tokens, draft_probs, target_probs, num_draft), greedy)
    n = np.full(2, num_draft)
    for scheme, kwargs in (("iid", {}), ("wor", {"replacement": False})):
        if scheme == "wor" and vocab - q_zeros < 2:
            continue  # two distinct siblings need two tokens of positive draft probability
        for _, tokens, draft_probs, target_probs in en.enumerate_drafts(
            model, scheme, 2, length, num_draft
        ):
            greedy = _multi_path_greedy(tokens, target_probs, n)
            _assert_law_close(
                ref.specinfer_law(tokens, draft_probs, target_probs, n, **kwargs), {greedy: 1.0}
            )
            if scheme == "iid":
                _assert_law_close(
                    ref.spectr_law(tokens, draft_probs, target_probs, n), {greedy: 1.0}
                )
                gbv = ref.gbv_law(tokens, draft_probs, target_probs, n)
                _assert_law_close(_emitted(tokens, gbv), _emitted(tokens, {greedy: 1.0}))


@pytest.mark.parametrize("variant", ["dirichlet", "q_zeros", "p_zeros", "one_hot_p", "p_equals_q"])
@pytest.mark.parametrize(("vocab", "length", "num_draft"), [(3, 3, 3), (4, 2, 1), (2, 3, 2)])
def test_single_path_reduces_to_chain(vocab, length, num_draft, variant):
    model = _model(vocab, length, variant, seed=9)
    for _, tokens, draft_probs, target_probs in en.enumerate_drafts(
        model, "chain", 1, length, num_draft
    ):
        multi = (tokens[None], draft_probs[None], target_probs[None], np.array([num_draft]))
        token = ref.token_law(tokens, draft_probs, target_probs, num_draft)
        block = ref.block_law(tokens, draft_probs, target_probs, num_draft)
        assert ref.gbv_law(*multi) == block
        assert ref.specinfer_law(*multi) == token
        assert ref.specinfer_law(*multi, replacement=False) == token
        assert ref.spectr_law(*multi) == token
        _, _, q_skew = ref.gbv_select(*multi)
        np.testing.assert_array_equal(q_skew, draft_probs)


def test_block_last_success_wins():
    """§3 example with x = (a, b): position 1's stop test always fails, yet tau = 2 surely."""
    model = en.bv_paper_model(2)
    tokens = np.array([0, 1])
    draft_probs = np.stack([model.q(()), model.q((0,))])
    target_probs = np.stack([model.p(()), model.p((0,)), model.p((0, 1))])
    w, h = ref.block_weights_and_stops(tokens, draft_probs, target_probs)
    np.testing.assert_allclose(w, [1.0, 0.5, 1.0], atol=TOL)
    np.testing.assert_allclose(h, [1.0, 0.0, 1.0], atol=TOL)
    block = ref.block_law(tokens, draft_probs, target_probs)
    assert abs(sum(prob for (tau, _, _), prob in block.items() if tau == 2) - 1.0) <= TOL
    token = ref.token_law(tokens, draft_probs, target_probs)
    assert abs(sum(prob for (tau, _, _), prob in token.items() if tau == 0) - 0.5) <= TOL


@pytest.mark.parametrize("seed", range(5))
def test_block_weights_closed_form(seed):
    """Sequential w recurrence == exp(S_i - max_{j<=i} S_j) with S the cumulative log ratio."""
    rng = np.random.default_rng([10, seed])
    vocab, length = 5, 6
    model = en.random_model(rng, vocab, length, alpha=0.7, p_zeros=seed % 2)
    batch = en.sample_drafts(model, "chain", 1, length, 20, rng)
    for tokens, draft_probs, target_probs in zip(
        batch.draft_tokens, batch.draft_probs, batch.target_probs, strict=True
    ):
        w, _ = ref.block_weights_and_stops(tokens, draft_probs, target_probs)
        with np.errstate(divide="ignore"):
            log_ratio = np.log(target_probs[np.arange(length), tokens]) - np.log(
                draft_probs[np.arange(length), tokens]
            )
        s = np.concatenate([[0.0], np.cumsum(log_ratio)])
        with np.errstate(invalid="ignore"):
            closed = np.exp(s - np.maximum.accumulate(s))
        np.testing.assert_allclose(w, closed, rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------------------
# Reference internals and harness sanity.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ref.LAWS))
def test_laws_are_distributions(name):
    model = _model(3, 3, "q_zeros", seed=11)
    scheme, num_paths = ("chain", 1) if name in ref.CHAIN_LAWS else ("iid", 3)
    batch = en.sample_drafts(
        model, scheme, num_paths, 3, 30, np.random.default_rng(11), num_draft=2
    )
    for row in range(30):
        law = ref.law(
            name,
            batch.draft_tokens[row],
            batch.draft_probs[row],
            batch.target_probs[row],
            batch.num_draft[row],
        )
        assert all(prob > 0 for prob in law.values())
        assert abs(sum(law.values()) - 1.0) <= TOL
        assert all(0 <= tau <= 2 for tau, _, _ in law)


def test_spectr_rho_solves_fixed_point():
    rng = np.random.default_rng(12)
    for _ in range(50):
        vocab = int(rng.integers(2, 7))
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        assert ref.spectr_rho(p, q, 1) == 1.0
        for k in (2, 3, 5):
            rho = ref.spectr_rho(p, q, k)
            assert 1.0 <= rho <= k
            beta = np.minimum(q, p / rho).sum()
            p_acc = 1 - (1 - beta) ** k
            assert p_acc / beta <= rho * (1 + 1e-12)
            if rho > 1:
                assert abs(p_acc / beta - rho) <= 1e-12
    assert ref.spectr_rho(np.array([0.5, 0.5]), np.array([0.5, 0.5]), 3) == 1.0


def _rank_key(tokens, draft_probs, target_probs, j):
    """GBV rank of path j: per depth (p/q of its token, unclipped; +inf if q = 0 < p; token)."""
    key = []
    for d in range(tokens.shape[1]):
        x = int(tokens[j, d])
        p, q = target_probs[j, d, x], draft_probs[j, d, x]
        kappa = p / q if q > 0 else (np.inf if p > 0 else 0.0)
        key.append((kappa, x))
    return tuple(key)


def _lexicographic_max_brute_force(model, num_paths, length):
    """P(the GBV-maximal of K i.i.d. paths has prefix u) for every prefix u, by brute force."""
    prefix_prob = {}
    for weight, tokens, draft_probs, target_probs in en.enumerate_drafts(
        model, "iid", num_paths, length
    ):
        ranks = [_rank_key(tokens, draft_probs, target_probs, j) for j in range(num_paths)]
        best = int(np.argmax([r == max(ranks) for r in ranks]))
        for d in range(length + 1):
            u = tuple(tokens[best, :d].tolist())
            prefix_prob[u] = prefix_prob.get(u, 0.0) + weight
    return prefix_prob


@pytest.mark.parametrize(("vocab", "length", "num_paths"), [(3, 2, 2), (2, 2, 3), (3, 2, 3)])
def test_gbv_skew_is_law_of_the_maximum(vocab, length, num_paths):
    """q_skew(x | v) = P(max path continues with x | max path passes through v)."""
    model = _model(vocab, length, "q_zeros" if vocab == 3 else "dirichlet", seed=13)
    prefix_prob = _lexicographic_max_brute_force(model, num_paths, length)
    for _, tokens, draft_probs, target_probs in en.enumerate_drafts(
        model, "iid", num_paths, length
    ):
        path, n_sel, q_skew = ref.gbv_select(tokens, draft_probs, target_probs)
        assert n_sel == length
        selected = tokens[path].tolist()
        assert all(tokens[j].tolist() != selected for j in range(path))  # smallest index
        for d in range(length):
            u = tuple(selected[:d])
            expected = [prefix_prob.get((*u, x), 0.0) / prefix_prob[u] for x in range(vocab)]
            np.testing.assert_allclose(q_skew[d], expected, atol=1e-12)


@pytest.mark.parametrize("scheme", ["iid", "wor", "wor_tree"])
def test_enumeration_and_sampling_agree(scheme):
    """The enumerated draft law sums to 1 and matches sample_drafts' frequencies."""
    vocab, length, num_paths, num = 3, 2, (4 if scheme == "wor_tree" else 2), 20_000
    model = _model(vocab, length, "dirichlet", seed=14)
    exact = {}
    for weight, tokens, draft_probs, target_probs in en.enumerate_drafts(
        model, scheme, num_paths, length
    ):
        exact[tuple(tokens.ravel().tolist())] = weight
        for j in range(num_paths):  # rows are the plain model rows along each path
            for d in range(length):
                np.testing.assert_array_equal(draft_probs[j, d], model.q(tokens[j, :d]))
            np.testing.assert_array_equal(target_probs[j, length], model.p(tokens[j]))
    assert abs(sum(exact.values()) - 1.0) <= TOL
    batch = en.sample_drafts(model, scheme, num_paths, length, num, np.random.default_rng(14))
    empirical = en.empirical_law(batch.draft_tokens.reshape(num, -1))
    assert set(empirical) <= set(exact)
    for key, prob in exact.items():
        sigma = np.sqrt(prob * (1 - prob) / num)
        assert abs(empirical.get(key, 0.0) - prob) <= 5 * sigma + 1e-9
    first = batch.draft_tokens[:, :, 0]
    same = first[:, :, None] == first[:, None, :]
    ids = batch.prefix_id[:, :, 1]
    np.testing.assert_array_equal(same, ids[:, :, None] == ids[:, None, :])


def test_complete_with_target_matches_joint():
    model = _model(2, 2, "dirichlet", seed=15)
    rng = np.random.default_rng(15)
    num = 20_000
    strings = en.complete_with_target(model, np.full((num, 3), -1), 3, rng)
    joint = en.target_joint(model, 3)
    empirical = en.empirical_law(strings)
    for key, prob in joint.items():
        assert abs(empirical.get(key, 0.0) - prob) <= 5 * np.sqrt(prob * (1 - prob) / num) + 1e-9
    prefixes = en.emitted_prefixes(np.array([[1, 0], [0, 1]]), np.array([2, 0]), np.array([1, 1]))
    np.testing.assert_array_equal(prefixes, [[1, 0, 1], [1, -1, -1]])
    completed = en.complete_with_target(model, prefixes, 3, rng)
    np.testing.assert_array_equal(completed[0], [1, 0, 1])
    assert completed[1, 0] == 1 and np.all(completed[1] >= 0)
