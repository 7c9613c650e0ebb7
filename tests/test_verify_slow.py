"""Slow tier (``python -m pytest -m slow``): larger Monte-Carlo runs and realistic sizes."""

from __future__ import annotations

import zlib
from collections import Counter

import jax
import numpy as np
import pytest

from specjax import verify
from specjax.verify import synthetic
from tests import enumeration as en
from tests.test_verify_montecarlo import P_MIN, chi_square_pvalue, run_batch

pytestmark = pytest.mark.slow

LARGE_CASES = [
    ("block", {}, "chain", 1, 4, 3),
    ("specinfer", {}, "iid", 4, 3, 3),
    ("specinfer", {"replacement": False}, "wor", 4, 3, 4),
    ("spectr", {}, "iid", 4, 3, 3),
    ("gbv", {}, "iid", 4, 3, 3),
]


@pytest.mark.parametrize("case", LARGE_CASES, ids=lambda c: f"{c[0]}{c[1] or ''}-K{c[3]}-L{c[4]}")
def test_sequence_law_one_million_samples(case):
    name, kwargs, scheme, k, l, v = case
    seed = zlib.crc32(str(case).encode())
    rng = np.random.default_rng(seed)
    model = en.random_model(rng, v, l, alpha=0.8)
    counts, total = Counter(), 0
    for chunk in range(5):
        batch = en.sample_drafts(model, scheme, k, l, 200_000, rng)
        tau, nxt, path = run_batch(name, kwargs, batch, seed + chunk)
        emitted = en.emitted_prefixes(batch.draft_tokens, tau, nxt, path if k > 1 else None)
        strings = en.complete_with_target(model, emitted, l + 1, rng)
        counts.update(map(tuple, strings.tolist()))
        total += len(strings)
    p_value = chi_square_pvalue(counts, en.target_joint(model, l + 1), total)
    assert p_value > P_MIN, f"{name}: p = {p_value:.2e}"


@pytest.mark.parametrize("name", sorted(verify.VERIFIERS))
def test_realistic_size_is_finite_and_valid(name):
    """V = 131072, K = 4, L = 8, B = 4: valid outputs, emitted tokens have target mass."""
    family = synthetic.SyntheticFamily(vocab_size=131072, sharpness=3.0, draft_noise=1.0)
    d = synthetic.sample_draft(jax.random.key(0), family, 4, 4, 8)
    args = tuple(d) if verify.is_multipath(name) else tuple(x[:, 0] for x in d)
    res = jax.jit(verify.get(name))(jax.random.key(1), *args)
    tau, nxt, path = (np.asarray(x) for x in res)
    assert ((tau >= 0) & (tau <= 8)).all() and ((path >= 0) & (path < 4)).all()
    p = np.asarray(d.target_probs)
    rows = p[np.arange(4), path, tau] if verify.is_multipath(name) else p[np.arange(4), 0, tau]
    assert (rows[np.arange(4), nxt] > 0).all()
