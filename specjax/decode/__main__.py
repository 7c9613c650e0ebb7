r"""Speculative decoding from the command line.

  python -m specjax.decode --config configs/shakespeare.py
  python -m specjax.decode --config configs/shakespeare.py --config.verifier=gbv \
      --config.num_paths=3 --config.temperature=0 --config.compare_autoregressive=True

Every key of the config file can be overridden as ``--config.<key>=<value>``; see
``configs/shakespeare.py`` for the list. Errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

# ruff: noqa: E402 (the early handlers go in before the imports below load JAX)
from specjax.cli import interrupts

# Until decode.main() installs its own handlers, SIGINT/SIGTERM exit at once with one line (the
# specjax.decode package imports nothing heavy, so this runs within moments of the start).
interrupts.exit_on_signals()

import sys

from absl import app, logging
from ml_collections import config_flags

from specjax.cli import decode
from specjax.config_files import loaded_config, parse_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Decoding config file (configs/*.py).")


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; use --config.<key>=<value>")
    cfg = loaded_config(_CONFIG, "configs/shakespeare.py")
    logging.set_verbosity(logging.WARNING)
    decode.main(cfg)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
