"""Exact tests of the NumPy reference laws of the multi-path verifiers (SpecInfer, SpecTr, GBV).

Losslessness by exact enumeration, the single-step golden values (docs/algorithms.md), the
temperature-0 and single-path reductions, SpecTr's ρ* and GBV's skewed draft rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from specjax.verify import reference as ref
from tests import enumeration as en
from tests.reference_exact_cases import (
    MULTI_LAWS,
    TOL,
    VARIANTS,
    lossless_error,
    root_support,
    variant_model,
)

# (V, L, K): every V in {2, 3, 4}, L in {1, 2, 3} and K in {1, 2, 3} appears, sizes kept small.
MULTI_SIZES = [(2, 3, 3), (3, 2, 3), (4, 1, 3), (3, 3, 2), (4, 2, 2), (2, 2, 1), (3, 1, 2)]


def _assert_law_close(law_a: ref.Law, law_b: ref.Law, tol: float = TOL) -> None:
    keys = set(law_a) | set(law_b)
    err = max(abs(law_a.get(k, 0.0) - law_b.get(k, 0.0)) for k in keys)
    assert err <= tol, (law_a, law_b)


# --------------------------------------------------------------------------------------------
# Losslessness by exact enumeration.
# --------------------------------------------------------------------------------------------


def _multi_cases() -> list:
    """(case, V, L, K, variant) of every law, size and variant, but for sibling draws without
    replacement of more paths than the root's draft support (K <= |support(q)| is their
    premise: such a tree cannot be drawn)."""
    out = []
    for case, (_, scheme, _) in MULTI_LAWS.items():
        for vocab, length, k in MULTI_SIZES:
            for variant in VARIANTS:
                model = variant_model(vocab, length, variant, seed=3)
                if scheme == "wor" and root_support(model) < k:
                    continue
                out.append(
                    pytest.param(
                        case, vocab, length, k, variant, id=f"{case}-{vocab}-{length}-{k}-{variant}"
                    )
                )
    return out


@pytest.mark.parametrize(("case", "vocab", "length", "num_paths", "variant"), _multi_cases())
def test_multi_path_lossless(case, vocab, length, num_paths, variant):
    name, scheme, kwargs = MULTI_LAWS[case]
    model = variant_model(vocab, length, variant, seed=3)
    assert lossless_error(model, name, scheme, num_paths, length, **kwargs) <= TOL


def _two_tokens_per_sibling(vocab: int, length: int, variant: str) -> bool:
    model = variant_model(vocab, length, variant, seed=5)
    return min(np.count_nonzero(row > 0) for table in model.q_table[:2] for row in table) >= 2


@pytest.mark.parametrize(
    ("vocab", "length", "variant"),
    [
        (v, l, variant)
        for v, l in [(3, 2), (4, 2), (2, 2)]
        for variant in ["dirichlet", "q_zeros", "one_hot_p", "p_zeros"]
        if _two_tokens_per_sibling(v, l, variant)  # siblings without replacement need two
    ],
)
def test_wor_tree_lossless(vocab, length, variant):
    """RRS without replacement on a 2 x 2 tree whose siblings are drawn without replacement."""
    model = variant_model(vocab, length, variant, seed=5)
    error = lossless_error(model, "specinfer", "wor_tree", 4, length, replacement=False)
    assert error <= TOL


# --------------------------------------------------------------------------------------------
# Golden values.
# --------------------------------------------------------------------------------------------

# docs/algorithms.md, golden values: p, q, k, 1-TV, RRS w/, k-SEQ w/, rho*, RRS w/o (4 decimals).
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
    model = variant_model(vocab, length, variant, seed=9)
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


# --------------------------------------------------------------------------------------------
# Reference internals.
# --------------------------------------------------------------------------------------------


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
    model = variant_model(vocab, length, "q_zeros" if vocab == 3 else "dirichlet", seed=13)
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
