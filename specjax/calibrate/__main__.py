r"""Measures the width costs of a decode config into a costs file.

  python -m specjax.calibrate --config configs/shakespeare.py --config.width_costs=costs.json
  python -m specjax.decode --config configs/shakespeare.py --config.width_costs=costs.json

Takes every key of the decode config; see :mod:`specjax.cli.calibrate`.
"""

from __future__ import annotations

import sys

from absl import app, logging
from ml_collections import config_flags

from specjax.cli import calibrate
from specjax.cli.app import run_or_exit
from specjax.config_files import loaded_config, parse_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Decoding config file (configs/*.py).")


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; use --config.<key>=<value>")
    cfg = loaded_config(_CONFIG, "configs/shakespeare.py")
    logging.set_verbosity(logging.WARNING)
    run_or_exit(calibrate.run, cfg)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
