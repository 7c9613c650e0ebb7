"""scripts/reproduce.py: the exact claims and the closed forms on rows a draft head logs (zeros
outside its draft vocabulary) in the default tier (seconds); the head pair's logging and observed
decoding on a tiny model, and the --quick run end to end, in the slow tier (about 5 minutes)."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from reproducelib import chain_exact, claims, logged, multidraft_exact, observe, toy
from reproducelib.settings import FULL, QUICK

from specjax import verify
from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import prefill_program, prepare
from specjax.drafters import FeatureDrafter
from specjax.models import Decoder
from specjax.models.eagle import EagleConfig, EagleHead
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams
from specjax.testing import sharpened, tiny_config
from specjax.verify import acceptance, reference

ROOT = Path(__file__).resolve().parents[1]


def test_bv_toy_claim_is_exact():
    values = toy.bv_toy()
    assert abs(values["token"] - 10 / 9) < 1e-6
    assert abs(values["block"] - 11 / 9) < 1e-6
    assert abs(values["optimum"] - 12 / 9) < 1e-6
    assert abs(values["bound"] - 12 / 9) < 1e-6
    assert [claims.over(values[k], 9) for k in ("token", "block", "optimum")] == [
        "10/9",
        "11/9",
        "12/9",
    ]


def test_context_example_and_longer_blocks():
    assert toy.context_example() == pytest.approx({"token": 13 / 10, "block": 57 / 40}, abs=1e-12)
    (length, token, block, _) = toy.golden_lengths()[2]
    assert (length, token, block) == pytest.approx((3, 38 / 27, 5 / 3), abs=1e-12)


def test_block_expectations_match_the_reference_laws():
    rng = np.random.default_rng(0)
    for _ in range(5):
        q, p = rng.dirichlet(np.ones(4), 3), rng.dirichlet(np.ones(4), 4)
        x = rng.integers(0, 4, 3)
        assert chain_exact.token_expected(x, q, p) == pytest.approx(
            reference.expected_accepted(reference.token_law(x, q, p)), abs=1e-12
        )
        assert chain_exact.block_expected(x, q, p) == pytest.approx(
            reference.expected_accepted(reference.block_law(x, q, p)), abs=1e-12
        )


def test_single_step_closed_forms_match_the_reference_laws():
    assert multidraft_exact.check_against_reference(seed=1, trials=2, vocab=4) < 1e-12


def _rows_with_undrafted_tokens(seed: int, vocab: int, rows: int, undrafted: int):
    """(p, q) rows where q is 0 on the same ``undrafted`` columns, as a draft head's."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(vocab) * 0.5, rows)
    q = rng.dirichlet(np.ones(vocab) * 0.7, rows)
    q[:, rng.permutation(vocab)[:undrafted]] = 0.0
    return p, q / q.sum(axis=1, keepdims=True)


def test_fast_specinfer_without_matches_the_reference_with_undrafted_tokens():
    p, q = _rows_with_undrafted_tokens(2, vocab=5, rows=3, undrafted=2)
    for pr, qr in zip(p, q, strict=True):
        for n in (2, 3):
            slow = acceptance.reference_acceptance(pr, qr, n)
            fast = acceptance.acceptance(pr, qr, n)
            assert max(abs(fast[k] - slow[k]) for k in fast) < 1e-12


def test_lumping_undrafted_tokens_changes_no_rate():
    p, q = _rows_with_undrafted_tokens(3, vocab=12, rows=4, undrafted=5)
    lp, lq = logged.lump_undrafted(p, q)
    assert lp.shape == (4, 8) and np.all(lq[:, -1] == 0) and np.allclose(lp.sum(axis=1), 1)
    for i in range(p.shape[0]):
        for n in (2, 3):
            full, lumped = (acceptance.acceptance(a[i], b[i], n) for a, b in ((p, q), (lp, lq)))
            assert full == pytest.approx(lumped, abs=1e-12)
    for replacement in (True, False):
        full, lumped = (
            np.asarray(verify.optimal_acceptance(a, b, 2, replacement=replacement))
            for a, b in ((p.astype(np.float32), q.astype(np.float32)),
                         (lp.astype(np.float32), lq.astype(np.float32)))
        )  # fmt: skip
        np.testing.assert_allclose(full, lumped, atol=1e-6)
    same = logged.lump_undrafted(p, p)  # nothing undrafted: unchanged
    assert same[0] is p and same[1] is p


def test_every_pair_has_sizes():
    for settings in (FULL, QUICK):
        for name in ("shakespeare", "smollm2", "smollm2_head"):
            sizes = settings.sizes(name)
            assert sizes.lengths and sizes.tokens > 0 and sizes.observe_paths >= 1
        assert settings.sizes("smollm2_head").gbv_paths  # the head pair's GBV rows run in quick
    assert FULL.sizes("smollm2_head").gbv_paths == (2, 3, 4)
    with pytest.raises(ValueError, match="unknown pair"):
        FULL.sizes("nope")


@pytest.fixture(scope="module")
def tiny_head_drafter():
    """A tiny target and a random feature head over 8 of its 12 ids: ``(target, make)``."""
    target = PureModel.of(sharpened(Decoder(tiny_config(12, name="t"), rngs=nnx.Rngs(3)), 3.0))
    config = EagleConfig.for_target(target.config, (0, 1), 8)
    d2t = np.sort(np.random.default_rng(0).permutation(12)[:8])
    embed = target.module.embed[...]
    head = EagleHead.create(config, embed, d2t, seed=0, head_rows=embed[d2t] * 4.0)
    return target, lambda sp, k, l: FeatureDrafter(head, num_paths=k, draft_len=l, sampling=sp)


PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [4]]


@pytest.mark.slow  # compiles a tiny model's programs (~8 s)
def test_logged_head_law_is_the_law_it_drafts_from(tiny_head_drafter):
    """The head's teacher-forced law at a prompt's last position (what logged.py keeps) is the
    law FeatureDrafter reports for the first draft token after that prompt."""
    target, make = tiny_head_drafter
    params = SamplingParams(1.0)
    drafter = make(params, 1, 1)
    b = prepare(target, drafter, PROMPTS, DecodeConfig("block", params, 4))
    init = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
    state = init(target, drafter, b.prompts, b.lengths, b.active, np.int32(0),
                 capacity=b.capacity, buffer=b.buffer)  # fmt: skip
    draft, _ = jax.jit(drafter.propose)(state.draft_state, state.keys, state.tokens, state.lengths)
    batch = np.zeros((len(PROMPTS), max(map(len, PROMPTS))), np.int32)
    for i, prompt in enumerate(PROMPTS):
        batch[i, : len(prompt)] = prompt
    p, q = (np.asarray(x) for x in logged._laws(target, drafter, batch))
    for i, prompt in enumerate(PROMPTS):
        np.testing.assert_allclose(q[i, len(prompt) - 1], draft.probs[i, 0, 0], atol=1e-5)
    assert np.all(q[..., np.setdiff1d(np.arange(12), drafter.head.module.d2t[...])] == 0)
    np.testing.assert_allclose(q.sum(-1), 1, atol=1e-5)
    np.testing.assert_allclose(p.sum(-1), 1, atol=1e-5)


@pytest.mark.slow  # compiles a tiny model's decoding programs (~8 s)
def test_observe_decodes_as_generate_with_a_feature_drafter(tiny_head_drafter):
    """With one block per step, observe's decoding is generate's (same seed, same tokens): the
    head gets the target's features of the verified chain."""
    target, make = tiny_head_drafter
    params = SamplingParams(1.0)
    config = DecodeConfig("block", params, 12)
    seen = observe.observe(target, make(params, 1, 3), PROMPTS, config, seed=5)
    assert seen.tokens == generate(target, PROMPTS, config, make(params, 1, 3), seed=5).tokens
    assert seen.tau.size > 0 and np.all((seen.e_token >= 0) & (seen.e_token <= 3))
    tv = 1 - seen.overlap  # the exact coupled acceptance at each first draft position
    assert seen.coupled.shape == seen.tau.shape
    assert np.all(seen.coupled >= (1 - tv) / (1 + tv) - 1e-5)
    assert np.all(seen.coupled <= seen.overlap + 1e-5)


def test_claim_row_format():
    claim = claims.Claim("Sun et al.", "BV ≥ token", "+0.14 | paired", claims.HOLDS, 2)
    row = claims.claim_row(3, claim)
    assert row == (
        "| 3 | Sun et al. | BV ≥ token | +0.14 \\| paired | **holds** | [§2](#section-2) |"
    )
    table = claims.claim_table([claim, claim])
    assert table.count("\n") == 3 and table.startswith("| # | paper | claim |")
    assert claims.tally([claim]) == "1 claim: 1 holds"
    assert claims.tally([claim] * 3) == "3 claims: 3 hold"
    with pytest.raises(ValueError, match="unknown verdict"):
        claims.Claim("a", "b", "c", "maybe", 1)


@pytest.mark.slow
def test_quick_run_writes_the_report(tmp_path):
    report = tmp_path / "REPRODUCTION.md"
    cmd = [
        sys.executable,
        "scripts/reproduce.py",
        "--quick",
        f"--output={report}",
        f"--plot_dir={tmp_path / 'plots'}",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    text = report.read_text(encoding="utf-8")

    # Header: the exact command, the machine, jax, the date.
    assert "`python scripts/reproduce.py --quick" in text
    assert "jax " in text and "cores" in text
    assert datetime.datetime.now(datetime.UTC).date().isoformat() in text

    # The BV toy numbers, exactly.
    for fraction, decimal in (("10/9", "1.111111"), ("11/9", "1.222222"), ("12/9", "1.333333")):
        assert fraction in text and decimal in text
    assert re.search(r"10/9, 11/9, 12/9 by exact enumeration", text)

    # A claim row per claim, each with a verdict and a section link.
    table = text.split("| # | paper | claim |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert len(rows) >= 15
    verdicts = ("holds", "does not hold", "partly", "not measured here")
    assert all(any(f"**{v}**" in row for v in verdicts) for row in rows)
    assert all(re.search(r"\[§[1-6]\]\(#section-[1-6]\)", row) for row in rows)
    for n in range(1, 7):
        assert f'<a id="section-{n}"></a>' in text
    invariance = next(row for row in rows if "drafter invariance" in row)
    assert "**holds**" in invariance  # gumbel's rows equal drafter=none's, token for token
    # The SmolLM2 + learned head pair's rows in §2, §3 and §4, and its claim rows.
    assert "| smollm2_head | 4 |" in text  # BV against token verification
    assert re.search(r"\| smollm2_head \| gbv \| 2 \| ", text)  # GBV against BV
    assert "**SmolLM2-135M + learned draft head** (" in text  # α / α* on logged laws
    assert "BV never worse than token verification: SmolLM2-135M + learned draft head" in text
    assert "below the optimal acceptance α* (SmolLM2-135M + learned draft head, logged)" in text
    plots = sorted(p.name for p in (tmp_path / "plots").glob("reproduce_*.png"))
    assert len(plots) == 5, plots
