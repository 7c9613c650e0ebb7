"""scripts/reproduce.py: the exact claims (default tier, seconds) and the --quick run end to end
(slow tier, about 5 minutes)."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # reproducelib lives beside the scripts

from reproducelib import chain_exact, claims, multidraft_exact, toy  # noqa: E402

from specjax.verify import reference  # noqa: E402


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
    assert all(re.search(r"\[§[1-5]\]\(#section-[1-5]\)", row) for row in rows)
    for n in range(1, 6):
        assert f'<a id="section-{n}"></a>' in text
    plots = sorted(p.name for p in (tmp_path / "plots").glob("reproduce_*.png"))
    assert len(plots) == 5, plots
