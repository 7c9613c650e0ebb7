r"""Simulates width policies (:mod:`specjax.decode.widths`) on synthetic acceptance, so their
choices can be judged without a model or a noisy clock, several policies side by side.

  python scripts/simulate_widths.py                                   # Goodput() as shipped
  python scripts/simulate_widths.py --policies=default,margin=1.0,probe=4+probe_max=64

``--policies``: ``default`` is ``Goodput()``; ``field=value`` overrides one of its fields
(``+`` joins several), e.g. ``rate=0.5``, ``reveal=1.01`` (off) (``benchlib.width_policies``).

One row, batch 1. Each scenario gives the true per-position acceptance (conditional on the
earlier positions; it may change after some tokens), the chance that an n-gram drafter has a
proposal at a step (a drafter with a free look at its first token: it learns that token's
verdict at width 0; a model draft or a head learns only by drafting), the true step cost of each
width in width-0 steps and the costs the policy is given (at T > 0 with block verification the
library guesses them, :func:`~specjax.decode.widths.guess_costs`), and what a drafting step right
after width-0 steps costs beyond its step (``switch``, plus ``catch_up`` per width-0 step
missed: a model draft feeding the tokens it missed; the policy does not see it). Each
generation runs the policy's own ``choose`` / ``observe`` / ``quota`` in one jitted loop, as
the decode program does (width-0 runs of a drafter without a free look booked at once, as long
as ``quota`` says); a step's verdicts are drawn from the true acceptance with random numbers
fixed per token position, so every policy and fixed width meets the same contexts. ``soft``
scenarios (T = 1) draw each step's acceptance per position around the scenario's (Beta,
``concentration`` = a + b), draw the verdicts from it and hand the policy Σ min(p, q) (that
acceptance), as chain steps at T > 0 do (``DecodeConfig.soft_verdicts``).

Reported per scenario, over ``--seeds`` generations of ``--tokens`` tokens: each policy's tokens
per width-0 step over the best fixed width's (width 0 is autoregressive decoding, 1.0), the ratio
of the means (``--per_generation``: the mean of each generation's ratio to its own best fixed
width, an oracle that knows each prompt), then the geometric mean over scenarios.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from benchlib import width_policies

from specjax.decode import widths

_SEEDS = flags.DEFINE_integer("seeds", 64, "Simulated generations per scenario.")
_TOKENS = flags.DEFINE_integer("tokens", 200, "Tokens per simulated generation.")
_POLICIES = flags.DEFINE_list(
    "policies", ["default"], "Goodput variants side by side: default, field=value[+field=value]"
)
_ONLY = flags.DEFINE_list("only", [], "Run only the scenarios whose name contains one of these.")
_PER_GEN = flags.DEFINE_bool(
    "per_generation", False, "each generation against its own best fixed width (mean of ratios)"
)
_DRAFTING = flags.DEFINE_bool("drafting", False, "also print each policy's drafting steps")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown report here.")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A pair and its prompts as a width policy sees them.

    Attributes:
      segments: ``(from token, acceptance [L], match)``: from that token on, the true
        conditional acceptance per draft position, and the chance that a drafter with a free
        look has a proposal at a step (1 for the others).
      costs: the true cost of a step at each width of ``widths``, in width-0 steps.
      given: the costs the policy is given (default ``costs``: measured right).
      widths: the widths to choose from (default ``(0, L)``).
      switch: the extra cost of a drafting step right after width-0 steps.
      catch_up: what each width-0 step before a drafting step adds to its switch.
      spread: each generation's acceptance is shifted by a uniform draw in ``[-spread,
        spread]`` (prompts differ).
      look: a drafter with a free look at its first token (n-gram lookup).
      soft: T = 1: each step's acceptance is drawn around the scenario's (Beta with
        ``concentration`` = a + b), and the policy sees it (soft verdicts).
    """

    segments: tuple[tuple[int, tuple[float, ...], float], ...]
    costs: tuple[float, ...]
    given: tuple[float, ...] | None = None
    widths: tuple[int, ...] | None = None
    switch: float = 0.0
    catch_up: float = 0.0
    spread: float = 0.0
    look: bool = False
    soft: bool = False
    concentration: float = 2.0

    @property
    def draft_len(self) -> int:
        return len(self.segments[0][1])

    @property
    def choices(self) -> tuple[int, ...]:
        return self.widths or (0, self.draft_len)


def steady(accept, match: float = 1.0) -> tuple:
    """One segment: ``accept`` from the first token on."""
    return ((0, tuple(accept), match),)


def change(at: int, before, after, match=(1.0, 1.0)) -> tuple:
    """Two segments: ``before`` until token ``at``, ``after`` from there."""
    return ((0, tuple(before), match[0]), (at, tuple(after), match[1]))


HEAD = (0.49, 0.53, 0.59)  # the SmolLM2 head at T = 0, over 770 forced drafting steps
POOLED = (0.50, 0.47, 0.45)  # its drafting steps over 23 held-out prompts (fixed L = 3: block
# efficiency 1.45-2.43 from prompt to prompt)
HEAD_T1 = (0.55, 0.5, 0.5)  # the head at T = 1: fixed L = 3 block efficiency 1.95, 1.15x
# autoregressive on the 2-core CPU (a drafting step ~1.7 one-token steps)
SHAKESPEARE_T1 = (0.89, 0.88, 0.95, 0.89)  # 2026-11-27; fixed L = 4 ran 1.16x autoregressive
SHAKESPEARE_T0 = (0.67, 0.79, 0.72, 0.99)  # fixed L = 4 ran 0.71-0.87x
GUESS_L3, GUESS_L4 = (tuple(float(c) for c in widths.guess_costs((0, w), 1)) for w in (3, 4))
COPY = (0.95,) * 6  # prompt lookup on a copy prompt: long matches, almost always right
CHAT = (0.3, 0.5, 0.5, 0.5, 0.5, 0.5)  # ... on a chat answer: short copied phrases
SCENARIOS = {
    # Drafts that pay.
    "drafts pay: acceptance 0.8, cost 1.6": Scenario(steady([0.8] * 3), (1.0, 1.6), switch=0.08),
    "head (SmolLM2 T=0, CPU costs)": Scenario(steady(HEAD), (1.0, 1.61), switch=0.08),
    "head, prompts 0.5 +- 0.2": Scenario(steady(POOLED), (1.0, 1.65), switch=0.08, spread=0.2),
    "L=4, acceptance 0.88, cost 3.6 (drafts pay 9%)": Scenario(
        steady([0.88] * 4), (1.0, 3.6), switch=0.1
    ),
    # Drafts that do not.
    "drafts lose: acceptance 0.1, cost 1.6": Scenario(steady([0.1] * 3), (1.0, 1.6), switch=0.08),
    "prompts 0.3 +- 0.2 (mostly losing), cost 1.65": Scenario(
        steady([0.3] * 3), (1.0, 1.65), switch=0.08, spread=0.2
    ),
    "Shakespeare T=0 (0.67-0.99, cost 3.1, catch-up 0.05)": Scenario(
        steady(SHAKESPEARE_T0), (1.0, 3.1), catch_up=0.05
    ),
    "mild loss: acceptance 0.3, cost 1.6": Scenario(steady([0.3] * 3), (1.0, 1.6), switch=0.08),
    "break-even: acceptance 0.85, cost 3.2": Scenario(steady([0.85] * 3), (1.0, 3.2), switch=0.1),
    # Changes of regime.
    "0.8 -> 0.1 after 60 tokens, cost 1.6": Scenario(
        change(60, [0.8] * 3, [0.1] * 3), (1.0, 1.6), switch=0.1
    ),
    "0.1 -> 0.8 after 60 tokens, cost 1.6 (a recovery)": Scenario(
        change(60, [0.1] * 3, [0.8] * 3), (1.0, 1.6), switch=0.1
    ),
    "head, 0.2 for tokens 60-100 (a dip)": Scenario(
        ((0, HEAD, 1.0), (60, (0.2,) * 3, 1.0), (100, HEAD, 1.0)), (1.0, 1.61), switch=0.08
    ),
    "0.9 -> 0.1 after 60 tokens, cost 3.2": Scenario(
        change(60, [0.9] * 3, [0.1] * 3), (1.0, 3.2), switch=0.1
    ),
    # Prompt lookup (n-gram, a free look at its first token), L = 6.
    "n-gram copy prompt, cost 1.6": Scenario(steady(COPY, 0.95), (1.0, 1.6), look=True),
    "n-gram copy prompt, cost 2.8": Scenario(steady(COPY, 0.95), (1.0, 2.8), look=True),
    "n-gram copy then free text at 100, cost 1.6": Scenario(
        change(100, COPY, CHAT, (0.95, 0.2)), (1.0, 1.6), look=True
    ),
    "n-gram chat (matches 0.3, acceptance 0.3-0.5), cost 1.6": Scenario(
        steady(CHAT, 0.3), (1.0, 1.6), look=True
    ),
    # T = 1: noisy verdicts, soft verdicts averaged.
    "T=1 head 0.55/0.5/0.5, cost 1.7, prompts +- 0.15": Scenario(
        steady(HEAD_T1), (1.0, 1.7), switch=0.08, spread=0.15, soft=True
    ),
    "T=1 head, costs guessed (1.3 for 1.7)": Scenario(
        steady(HEAD_T1), (1.0, 1.7), given=GUESS_L3, switch=0.08, spread=0.15, soft=True
    ),
    "T=1 Shakespeare (0.88-0.95, cost 3.2, catch-up 0.05)": Scenario(
        steady(SHAKESPEARE_T1), (1.0, 3.2), catch_up=0.05, soft=True
    ),
    "T=1 Shakespeare, costs guessed (1.4 for 3.2)": Scenario(
        steady(SHAKESPEARE_T1), (1.0, 3.2), given=GUESS_L4, catch_up=0.05, soft=True
    ),
    "T=1 L=4, acceptance 0.88, cost 4 (drafts lose)": Scenario(
        steady([0.88] * 4), (1.0, 4.0), switch=0.1, soft=True, concentration=8.0
    ),
}


SEGMENTS = 4
"""Segments a scenario may have (padded to it: one compiled loop serves every scenario alike)."""


def _arrays(s: Scenario) -> dict:
    """The scenario's numbers as device arrays, its segments padded to :data:`SEGMENTS`."""
    if len(s.segments) > SEGMENTS:
        raise ValueError(f"a scenario has at most {SEGMENTS} segments, not {len(s.segments)}")
    never = (np.iinfo(np.int32).max, s.segments[-1][1], s.segments[-1][2])
    padded = [*s.segments, *[never] * (SEGMENTS - len(s.segments))]
    starts, accepts, matches = zip(*padded, strict=True)
    return dict(
        starts=jnp.asarray(starts, jnp.int32),
        accept=jnp.asarray(accepts, jnp.float32),
        match=jnp.asarray(matches, jnp.float32),
        costs=jnp.asarray(s.costs, jnp.float32),
        given=jnp.asarray(s.given or s.costs, jnp.float32),
        switch=jnp.float32(s.switch),
        catch_up=jnp.float32(s.catch_up),
        spread=jnp.float32(s.spread),
        concentration=jnp.float32(s.concentration),
    )


def _generation(policy, choices, look, soft, tokens, a, key):
    """``(tokens made, cost in width-0 steps, steps per width [Y])`` of one generation."""
    l_len = a["accept"].shape[1]
    active = jnp.ones((1,), bool)
    inputs = widths.WidthInputs(a["given"], jnp.int32(widths.AUTO))
    width_of = jnp.asarray(choices, jnp.int32)
    k_shift, k_control, k_position = jax.random.split(key, 3)
    shift = jax.random.uniform(k_shift, (), minval=-1.0) * a["spread"]
    control = widths.init_control(1, l_len, choices, k_control)

    def body(c):
        control, made, spent, last, idle = c
        segment = jnp.sum(made >= a["starts"]) - 1
        mean = jnp.clip(a["accept"][segment] + shift, 0.0, 1.0)  # [L]
        draws = jax.random.split(jax.random.fold_in(k_position, made), 3)  # fixed per position
        has = jax.random.uniform(draws[0]) < (a["match"][segment] if look else 1.0)
        hint = jnp.where(has, l_len, 0)[None].astype(jnp.int32)
        index, control = policy.choose(control, inputs, hint, active, look)
        width = width_of[index]
        p = mean
        if soft:  # this context's acceptance, around the scenario's
            k = a["concentration"]
            alpha, beta = jnp.maximum(mean * k, 1e-3), jnp.maximum((1.0 - mean) * k, 1e-3)
            p = jax.random.beta(draws[1], alpha, beta)
        hits = jax.random.uniform(draws[2], (l_len,)) < p
        proposed = jnp.where(width > 0, jnp.minimum(width, hint[0]), hint[0] > 0).astype(jnp.int32)
        pos = jnp.arange(l_len)
        tau = jnp.sum(jnp.cumprod(hits) * (pos < proposed)).astype(jnp.int32)
        tau = jnp.where(width > 0, tau, 0)
        hard = jnp.where(width > 0, tau, (proposed > 0) & hits[0]).astype(jnp.int32)
        overlap = jnp.where(width > 0, p, -1.0)[None] if soft else None
        seen = policy.observe(control, index, active, hard[None], proposed[None], overlap)
        cost = a["costs"][index] + jnp.where(
            (width > 0) & (last == 0), a["switch"] + a["catch_up"] * idle, 0.0
        )
        # Width 0 without a free look: a run of one-token steps as long as the policy asks,
        # booked at once (the decode program's idle runs).
        runs = jnp.minimum(policy.quota(control, inputs), tokens - made)
        booked = dataclasses.replace(
            control,
            steps=control.steps.at[0].add(runs),
            idle=control.idle + runs,
            last=jnp.int32(0),
        )
        idle_run = (width == 0) & (not look)
        control = jax.tree.map(lambda x, y: jnp.where(idle_run, x, y), booked, seen)
        made += jnp.where(idle_run, runs, 1 + tau)
        spent += jnp.where(idle_run, runs.astype(jnp.float32), cost)
        idle = jnp.where(width == 0, idle + jnp.where(idle_run, runs, 1), 0)
        return control, made, spent, index, idle

    start = (control, jnp.int32(0), jnp.float32(0.0), jnp.int32(-1), jnp.int32(0))
    control, made, spent, _, _ = jax.lax.while_loop(lambda c: c[1] < tokens, body, start)
    return made, spent, control.steps


@functools.cache
def _compiled(policy, choices: tuple[int, ...], look: bool, soft: bool, tokens: int):
    run = functools.partial(_generation, policy, choices, look, soft, tokens)
    return jax.jit(jax.vmap(run, in_axes=(None, 0)))


def simulate(s: Scenario, policy, seeds: int, tokens: int) -> dict[str, np.ndarray]:
    """Per generation (seeds 0 .. seeds - 1): ``speed`` (tokens per width-0 step) and ``steps``
    (steps per width ``[seeds, Y]``) under ``policy``."""
    keys = jax.vmap(jax.random.key)(jnp.arange(seeds))
    made, spent, steps = _compiled(policy, s.choices, s.look, s.soft, tokens)(_arrays(s), keys)
    made, spent, steps = jax.device_get((made, spent, steps))
    return dict(speed=made / spent, steps=steps)


def best_fixed(s: Scenario, seeds: int, tokens: int) -> np.ndarray:
    """``[Y, seeds]``: each generation's speed at each fixed width (width 0: 1.0)."""
    return np.stack(
        [simulate(s, widths.Fixed(i), seeds, tokens)["speed"] for i in range(len(s.choices))]
    )


def score(speed: np.ndarray, fixed: np.ndarray, per_generation: bool) -> float:
    """A policy's speeds over the best fixed width's: ratio of the means, or mean of the ratios
    to each generation's own best."""
    if per_generation:
        return float(np.mean(speed / np.max(fixed, axis=0)))
    return float(np.mean(speed) / np.max(np.mean(fixed, axis=1)))


def main(argv):
    del argv
    try:
        policies = width_policies.parse_all(_POLICIES.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    chosen = {
        k: v for k, v in SCENARIOS.items() if not _ONLY.value or any(o in k for o in _ONLY.value)
    }
    seeds, tokens = _SEEDS.value, _TOKENS.value
    rows, scores = [], {name: [] for name in policies}
    for name, s in chosen.items():
        fixed = best_fixed(s, seeds, tokens)
        row = [name, f"{np.mean(fixed[-1]):.3f}"]
        for label, policy in policies.items():
            run = simulate(s, policy, seeds, tokens)
            scores[label].append(score(run["speed"], fixed, _PER_GEN.value))
            cell = f"{scores[label][-1]:.3f}"
            if _DRAFTING.value:
                cell += f" ({np.mean(np.sum(run['steps'][:, 1:], axis=1)):.1f})"
            row.append(cell)
        rows.append(row)
        benchlib.log(f"{name}: {row[1:]}")
    rows.append(
        ["**geometric mean**", ""]
        + [f"**{statistics.geometric_mean(scores[p]):.3f}**" for p in policies]
    )
    over = "its own best fixed width (mean of ratios)" if _PER_GEN.value else "the best fixed width"
    drafting = " In brackets: drafting steps per generation." if _DRAFTING.value else ""
    report = "\n".join(
        [
            f"# Width policies on synthetic acceptance\n\n{benchlib.command()}\n",
            f"{seeds} generations of {tokens} tokens per scenario, one row, widths (0, L); time "
            f"in width-0 steps. fixed L / AR: drafting every step over autoregressive decoding; "
            f"then each policy's speed over {over}.{drafting}\n",
            benchlib.table(["scenario", "fixed L / AR", *policies], rows, left=1),
        ]
    )
    benchlib.write_report(report, _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
