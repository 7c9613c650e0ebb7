r"""Simulates the width controller (:mod:`specjax.decode.widths`) on synthetic acceptance, so
its choices can be judged without a model or a noisy clock.

  python scripts/simulate_widths.py                      # the controller as shipped
  python scripts/simulate_widths.py --rates=0.25,0.0625  # what-if: other moving-average rates

One row, a drafter without a free look at its proposals (a model draft or a learned head: it
learns only by drafting, and probes while idle), ``widths=(0, L)``. Each scenario gives the true
per-position acceptance (conditional on the earlier positions, possibly changing after some
tokens), the width costs, the switch cost and the prior the calibration would hand over. Each
step runs the jitted :func:`~specjax.decode.widths.choose` and
:func:`~specjax.decode.widths.observe` exactly as the decode program does; a drafting step's
accepted length is drawn from the true acceptance. Time is counted in width-0 steps (a drafting
step costs ``costs[1]``, plus ``switch`` right after a width-0 step), so the ratios below are
what the controller would give on a machine whose step costs are exactly those.

Reported per scenario (mean over ``--seeds`` generations of ``--tokens`` tokens): tokens per
width-0 step for the controller and for drafting at every step (``fixed``), both over
autoregressive decoding (1.0), and the controller over the better of the two.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from specjax.decode import widths

_SEEDS = flags.DEFINE_integer("seeds", 40, "Simulated generations per scenario.")
_TOKENS = flags.DEFINE_integer("tokens", 200, "Tokens per simulated generation.")
_RATES = flags.DEFINE_list("rates", [], "What-if values of widths.RATE (default: as shipped).")
_BONUS = flags.DEFINE_list("bonus", [], "What-if values of widths.BONUS (default: as shipped).")
_ONLY = flags.DEFINE_list("only", [], "Run only the scenarios whose name contains one of these.")
_SOFT = flags.DEFINE_list(
    "soft",
    ["0"],
    "1: each drafting step's acceptance per position varies with its context (Beta around the "
    "scenario's, --concentration), and the controller averages it (Σ min(p, q), what a chain "
    "step reports at T > 0) instead of the verdicts; 0: verdicts only. E.g. --soft=0,1.",
)
_CONC = flags.DEFINE_float(
    "concentration", 2.0, "Beta a + b of a context's acceptance with --soft=1 (small: spread)."
)
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown table here.")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A pair as the controller sees it.

    Attributes:
      accept: the true conditional acceptance ``[L]`` after ``t`` tokens.
      costs: ``(1, cost of a drafting step)`` in width-0 steps.
      switch: the extra cost of a drafting step right after width-0 steps.
      prior: ``[L]`` the acceptance calibration hands over.
      spread: each generation's acceptance is ``accept`` shifted by a uniform draw in
        ``[-spread, spread]`` (prompts differ; the prior is the pair's mean over them).
      catch_up: what each width-0 step before a drafting step adds to its switch (a model
        draft feeding the tokens it missed), known to the controller as calibration books it.
    """

    accept: Callable[[int], list[float]]
    costs: tuple[float, float]
    switch: float
    prior: tuple[float, ...]
    spread: float = 0.0
    catch_up: float = 0.0


HEAD = (0.49, 0.53, 0.59)  # the SmolLM2 head at T = 0, over 770 forced drafting steps
POOLED = (0.50, 0.47, 0.45)  # its drafting steps over 23 held-out prompts (fixed L = 3: block
# efficiency 1.45-2.43 from prompt to prompt)
HEAD_T1 = (0.55, 0.5, 0.5)  # the session-17 head at T = 1: fixed L = 3 block efficiency 1.95,
# 1.15x autoregressive on this CPU (a drafting step ~1.7 one-token steps)
SHAKESPEARE_T1 = (0.89, 0.88, 0.95, 0.89)  # its calibration's prior (2026-11-27); fixed L = 4
# ran 1.16x autoregressive, the adaptive program forced to L = 4 1.21x
SHAKESPEARE_T0 = (0.67, 0.79, 0.72, 0.99)  # fixed L = 4 ran 0.71-0.87x
SCENARIOS = {
    "head (SmolLM2, CPU costs), true prior": Scenario(lambda t: HEAD, (1.0, 1.61), 0.08, HEAD),
    "head, one calibration round's prior": Scenario(
        lambda t: HEAD, (1.0, 1.61), 0.08, (0.40, 0.54, 0.18)
    ),
    "head, a prior from ~20 drafting steps": Scenario(
        lambda t: HEAD, (1.0, 1.61), 0.08, (0.64, 0.78, 0.59)
    ),
    "head's acceptance -> 0.1 after 60 tokens": Scenario(
        lambda t: HEAD if t < 60 else [0.1] * 3, (1.0, 1.61), 0.08, HEAD
    ),
    "acceptance 0.8 -> 0.1 after 60 tokens, cost 1.6": Scenario(
        lambda t: [0.8] * 3 if t < 60 else [0.1] * 3, (1.0, 1.61), 0.1, (0.8,) * 3
    ),
    "acceptance 0.1 -> 0.8 after 60 tokens, cost 1.6 (a recovery)": Scenario(
        lambda t: [0.1] * 3 if t < 60 else [0.8] * 3, (1.0, 1.61), 0.1, (0.8,) * 3
    ),
    "head, 0.2 for tokens 60-100, then back (a dip)": Scenario(
        lambda t: [0.2] * 3 if 60 <= t < 100 else HEAD, (1.0, 1.61), 0.08, HEAD
    ),
    "acceptance 0.9 -> 0.1 after 60 tokens, cost 3.2": Scenario(
        lambda t: [0.9] * 3 if t < 60 else [0.1] * 3, (1.0, 3.2), 0.1, (0.9,) * 3
    ),
    "break-even: acceptance 0.85, cost 3.2": Scenario(
        lambda t: [0.85] * 3, (1.0, 3.2), 0.1, (0.85,) * 3
    ),
    "head, prompts 0.5 +- 0.2, the pair's prior": Scenario(
        lambda t: POOLED, (1.0, 1.65), 0.08, POOLED, spread=0.2
    ),
    "head, prompts 0.5 +- 0.2, prior 0.1 low": Scenario(
        lambda t: POOLED, (1.0, 1.65), 0.08, tuple(p - 0.1 for p in POOLED), spread=0.2
    ),
    "head at T = 1: 0.55/0.5/0.5, cost 1.7, prompts +- 0.15": Scenario(
        lambda t: HEAD_T1, (1.0, 1.7), 0.08, HEAD_T1, spread=0.15
    ),
    "prompts 0.3 +- 0.2 (mostly not paying), cost 1.65": Scenario(
        lambda t: [0.3] * 3, (1.0, 1.65), 0.08, (0.3,) * 3, spread=0.2
    ),
    "L=4, acceptance 0.85, cost 4, switch 2.4 (drafts lose: Shakespeare T=0)": Scenario(
        lambda t: [0.85] * 4, (1.0, 4.0), 2.4, (0.85,) * 4
    ),
    "L=4, acceptance 0.88, cost 4, switch 2.4 (break-even: Shakespeare T=1)": Scenario(
        lambda t: [0.88] * 4, (1.0, 4.0), 2.4, (0.88,) * 4
    ),
    "L=4, acceptance 0.88, cost 3.6, switch 2.4 (drafts pay 9%)": Scenario(
        lambda t: [0.88] * 4, (1.0, 3.6), 2.4, (0.88,) * 4
    ),
    "L=4, Shakespeare T=1 as calibrated (acceptance 0.89-0.95, cost 3.2, switch 0.65)": Scenario(
        lambda t: SHAKESPEARE_T1, (1.0, 3.2), 0.65, SHAKESPEARE_T1
    ),
    "L=4, Shakespeare T=1, its catch-up 0.03 per idle step": Scenario(
        lambda t: SHAKESPEARE_T1, (1.0, 3.2), 0.0, SHAKESPEARE_T1, catch_up=0.03
    ),
    "L=4, Shakespeare T=0 (acceptance 0.67-0.99, cost 3.1), catch-up 0.03 per idle step": Scenario(
        lambda t: SHAKESPEARE_T0, (1.0, 3.1), 0.0, SHAKESPEARE_T0, catch_up=0.03
    ),
}


def drafted(accept: list[float], rng: np.random.Generator) -> int:
    """Accepted tokens of one drafting step: positions accepted in order until one is not."""
    tau = 0
    for p in accept:
        if rng.random() >= p:
            break
        tau += 1
    return tau


def simulate(s: Scenario, seed: int, tokens: int, step) -> tuple[float, float, int]:
    """``(controller tokens per width-0 step, fixed-width tokens per width-0 step, drafting
    steps)`` of one generation."""
    l_len = len(s.prior)
    policy = widths.Policy(
        jnp.asarray(s.costs, jnp.float32),
        jnp.int32(widths.AUTO),
        jnp.asarray(s.prior, jnp.float32),
        jnp.float32(s.switch),
        jnp.float32(s.catch_up),
    )
    control = widths.WidthControl.init(1, l_len, (0, l_len), jax.random.key(0))
    rng = np.random.default_rng(seed)
    shift = rng.uniform(-s.spread, s.spread) if s.spread else 0.0
    accept = lambda t: [float(np.clip(p + shift, 0.0, 1.0)) for p in s.accept(t)]
    rng = np.random.default_rng(seed)
    made, spent, last, drafting, idle = 0, 0.0, 0, 0, 0
    while made < tokens:
        index, control, tau = step(control, policy, rng, accept(made))
        made += 1 + tau
        switch = s.switch + s.catch_up * idle if last == 0 else 0.0
        spent += 1.0 if index == 0 else s.costs[1] + switch
        drafting += index > 0
        last, idle = index, idle + 1 if index == 0 else 0
    rng = np.random.default_rng(seed)
    made_fixed, steps = 0, 0
    while made_fixed < tokens:
        made_fixed += 1 + drafted(accept(made_fixed), rng)
        steps += 1
    return made / spent, made_fixed / (steps * s.costs[1]), drafting


def stepper(l_len: int, soft: bool = False, concentration: float = 2.0):
    """One controller step on the host: choose (jitted), draw the verdict, observe (jitted).

    ``soft``: the step's acceptance per position is drawn around the scenario's (Beta with
    ``concentration`` = a + b; the verdicts keep their law) and handed to the controller."""
    active, hint = jnp.ones((1,), bool), jnp.full((1,), l_len, jnp.int32)
    choose = jax.jit(lambda c, p: widths.choose(c, p, hint, active, (0, l_len)))
    observe = jax.jit(
        lambda c, i, tau, proposed, overlap: widths.observe(
            c, i, active, tau, proposed, overlap if soft else None
        )
    )

    def step(control, policy, rng, accept):
        index, control = choose(control, policy)
        index = int(index)
        overlap = np.full((1, l_len), -1.0, np.float32)
        if index > 0 and soft:
            k = concentration
            accept = [rng.beta(max(m * k, 1e-3), max((1 - m) * k, 1e-3)) for m in accept]
            overlap[0] = accept
        tau = drafted(accept, rng) if index > 0 else 0
        proposed = l_len if index > 0 else 0
        control = observe(
            control, jnp.int32(index), jnp.asarray([tau]), jnp.asarray([proposed]), overlap
        )
        return index, control, tau

    return step


def main(argv):
    del argv
    if set(_SOFT.value) - {"0", "1"}:
        raise app.UsageError(f"--soft takes 0 and/or 1 (e.g. --soft=0,1), not {_SOFT.value}")
    shipped = widths.RATE
    rates = [float(r) for r in _RATES.value] or [shipped]
    rows = []
    shipped_bonus = widths.BONUS
    bonuses = [float(b) for b in _BONUS.value] or [shipped_bonus]
    chosen = {
        k: v for k, v in SCENARIOS.items() if not _ONLY.value or any(o in k for o in _ONLY.value)
    }
    for rate, bonus, soft in itertools.product(rates, bonuses, _SOFT.value):
        # Read when choose/observe are traced (a fresh stepper per setting).
        widths.RATE, widths.BONUS = rate, bonus
        for name, s in chosen.items():
            step = stepper(len(s.prior), soft == "1", _CONC.value)
            runs = [simulate(s, seed, _TOKENS.value, step) for seed in range(_SEEDS.value)]
            adaptive, fixed, drafting = (float(np.mean(x)) for x in zip(*runs, strict=True))
            each = float(np.mean([a / max(f, 1.0) for a, f, _ in runs]))
            rows.append(
                [name, f"{rate:g}", f"{bonus:g}", soft, f"{adaptive:.3f}", f"{fixed:.3f}",
                 f"{adaptive / max(fixed, 1.0):.3f}", f"{each:.3f}", f"{drafting:.1f}"]
            )  # fmt: skip
            benchlib.log(f"RATE {rate:g} BONUS {bonus:g} soft {soft} {name}: {rows[-1][4:]}")
    widths.RATE, widths.BONUS = shipped, shipped_bonus
    header = [
        "scenario", "RATE", "BONUS", "soft", "adaptive / AR", "fixed / AR", "adaptive / best",
        "per generation", "drafting",
    ]  # fmt: skip
    report = "\n".join(
        [
            f"# Width controller on synthetic acceptance\n\n{benchlib.command()}\n",
            f"{_SEEDS.value} generations of {_TOKENS.value} tokens per scenario, one row, "
            f"widths (0, L); time in width-0 steps. adaptive / best: the means' ratio; per "
            f"generation: the mean of each generation's adaptive over its better of fixed and "
            f"autoregressive.\n",
            benchlib.table(header, rows, left=4),
        ]
    )
    print(report)
    benchlib.write_report(report, _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
