r"""Distills a small draft from a frozen target checkpoint (DistillSpec-style).

  python scripts/distill.py --config configs/shakespeare_draft.py
  # the baseline: the same draft trained on data alone
  python scripts/distill.py --config configs/shakespeare_draft.py --config.loss=ce \
      --config.workdir=runs/shakespeare_draft_ce \
      --config.export_dir=checkpoints/shakespeare/draft_ce

Losses: ``tv`` (total variation, what acceptance rewards), ``forward_kl``, ``ce`` (data only).
Data: ``corpus`` windows or ``target_samples`` (text sampled from the target at temperature 1).
Writes the draft (atomically) to ``config.export_dir`` with ``loss.png`` and ``summary.json``
holding held-out acceptance against the target: alpha = E[sum min(p, q)] and greedy agreement.
"""

from __future__ import annotations

from absl import app, logging
from ml_collections import config_flags

from specjax.cli import distill
from specjax.cli.app import run_or_exit
from specjax.config_files import loaded_config, parse_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Distillation config file.")


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # keep orbax's per-save INFO lines out
    run_or_exit(distill.run, loaded_config(_CONFIG, "configs/shakespeare_draft.py"))


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
