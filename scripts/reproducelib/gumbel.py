"""Claim 6: drafter-invariant speculative sampling (Daliri, Musco & Suresh, arXiv 2408.07978),
the ``gumbel`` verifier, beside block verification.

Per model pair, at temperature 1 and the pair's main draft length:

* **invariance**: :func:`specjax.decode.generate` with ``gumbel`` and with ``drafter=none``
  (``autoregressive``), same prompts and seeds: the rows must be identical token for token;
* **block efficiency**: ``gumbel`` against ``block`` (independent decodings, pooled over seeds);
* **per position, exact** (:mod:`reproducelib.observe`, on the contexts of a real BV decoding):
  at each step's first draft position, the probability that a coupled draft token is accepted
  (:func:`specjax.verify.coupled_acceptance`) against the paper's bound (1 - TV) / (1 + TV) and
  against 1 - TV, what token and block verification accept there.
"""

from __future__ import annotations

import dataclasses

import benchlib
import numpy as np

from reproducelib import observe, runs
from reproducelib.claims import Claim, Section, mean_se, verdict
from reproducelib.pairs import Pair
from reproducelib.settings import Settings
from specjax.decode import DecodeConfig
from specjax.sampling import SamplingParams

SAMPLED = SamplingParams(1.0)


@dataclasses.dataclass
class PairResult:
    pair: str
    length: int
    same: int  # rows equal to drafter=none's
    rows: int
    block: tuple[float, float, int]  # (BE, SE, steps)
    gumbel: tuple[float, float, int]
    observed: observe.Observed

    @property
    def bound(self) -> np.ndarray:
        tv = 1.0 - self.observed.overlap
        return (1.0 - tv) / (1.0 + tv)

    @property
    def margin(self) -> float:
        """The smallest coupled acceptance minus its bound over the observed positions."""
        return float(np.min(self.observed.coupled - self.bound))


def measure_pair(pair: Pair, settings: Settings) -> PairResult:
    sizes = settings.sizes(pair.name)
    length, tokens = sizes.lengths[0], sizes.tokens
    config = DecodeConfig("block", SAMPLED, tokens, pair.stop_tokens)
    chain = pair.make_drafter(SAMPLED, 1, length)
    gens = {
        name: runs.run_seeds(
            pair.target, pair.prompts, dataclasses.replace(config, verifier=name), chain, seeds
        )
        for name, seeds in (("block", settings.seeds), ("gumbel", settings.seeds))
    }
    plain = dataclasses.replace(config, verifier="autoregressive")
    alone = runs.run_seeds(pair.target, pair.prompts, plain, None, settings.seeds)
    pairs = [
        (a, b)
        for g, p in zip(gens["gumbel"], alone, strict=True)
        for a, b in zip(g.tokens, p.tokens, strict=True)
    ]
    seen = [observe.observe(pair.target, chain, pair.prompts, config, s) for s in settings.seeds]
    result = PairResult(
        pair.name,
        length,
        sum(a == b for a, b in pairs),
        len(pairs),
        runs.pooled(gens["block"]),
        runs.pooled(gens["gumbel"]),
        observe.Observed.concat(seen),
    )
    benchlib.log(f"gumbel vs block, {pair.name}: {result.same}/{result.rows} rows as drafter=none")
    return result


def _table(results: list[PairResult]) -> str:
    head = [
        "pair", "L", "rows = drafter=none", "BV BE", "gumbel BE", "gumbel / BV", "positions",
        "mean 1 − TV", "mean coupled", "mean bound", "min(coupled − bound)",
    ]  # fmt: skip
    rows = []
    for r in results:
        o = r.observed
        rows.append([
            r.pair, r.length, f"{r.same}/{r.rows}", mean_se(r.block[0], r.block[1]),
            mean_se(r.gumbel[0], r.gumbel[1]), f"{r.gumbel[0] / r.block[0]:.3f}", o.overlap.size,
            f"{o.overlap.mean():.4f}", f"{o.coupled.mean():.4f}", f"{r.bound.mean():.4f}",
            f"{r.margin:+.1e}",
        ])  # fmt: skip
    return benchlib.table(head, rows)


def run(pairs: dict[str, Pair], settings: Settings) -> Section:
    results = [measure_pair(pair, settings) for pair in pairs.values()]
    labels = {name: pair.label for name, pair in pairs.items()}
    claims = [
        Claim(
            "Daliri et al. (drafter invariance)",
            "the output is the target's sample of the seed, token for token, whatever the draft",
            "; ".join(f"{labels[r.pair]}: {r.same}/{r.rows} rows equal" for r in results),
            verdict(all(r.same == r.rows for r in results)),
            6,
        ),
        Claim(
            "Daliri et al., Thm. 2",
            "a coupled draft token is accepted with probability ≥ (1 − TV) / (1 + TV)",
            "; ".join(
                f"{labels[r.pair]}: mean {r.observed.coupled.mean():.3f} against bound "
                f"{r.bound.mean():.3f} and 1 − TV {r.observed.overlap.mean():.3f} "
                f"(min margin {r.margin:+.1e}, {r.observed.overlap.size} positions)"
                for r in results
            ),
            verdict(all(r.margin >= -1e-5 for r in results)),
            6,
        ),
    ]
    ratios = ", ".join(f"{r.pair} {r.gumbel[0] / r.block[0]:.3f}" for r in results)
    body = f"""Temperature 1, seeds {list(settings.seeds)}, the pairs' main draft length; the
draft's and the target's laws as sampled. `gumbel` draws the target's token at each absolute
position as the Gumbel-max of its law with noise from (seed, row, position); the drafter draws
with the same noise, and a draft token is accepted while it equals the target's
([docs/algorithms.md](docs/algorithms.md#drafter-invariant-sampling-gumbel)).

- **rows = drafter=none**: `generate` with `gumbel` against `generate` with no drafter, same
  prompts and seeds, compared token for token.
- **BE**: block efficiency (tokens per target call, ± SE) of independent decodings with `block`
  and with `gumbel`.
- **Per position, exact**: on the contexts of a real BV decoding, at each step's first draft
  position, 1 − TV(p, q) (what token and block verification accept there), the probability that
  a coupled draft token is accepted (`verify.coupled_acceptance`: Σ_a 1 / Σ_v max(p_v/p_a,
  q_v/q_a)) and the paper's bound (1 − TV) / (1 + TV).

{_table(results) if results else "(no model pair measured)"}

Reading: invariance costs acceptance, `gumbel`'s block efficiency over BV's being {ratios}. It
buys a seed that fixes the text whatever the drafter, the draft length or the widths a controller
picks.
"""
    return Section(6, "Drafter-invariant sampling (gumbel) against BV", claims, body, {})
