r"""Speculative decoding from the command line.

  python -m specjax.decode --config configs/shakespeare.py
  python -m specjax.decode --config configs/shakespeare.py --config.verifier=gbv \
      --config.num_paths=3 --config.temperature=0 --config.compare_autoregressive=True

Every key of the config file can be overridden as ``--config.<key>=<value>``; see
``configs/shakespeare.py`` for the list. Errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = "\ninterrupted: no output file was written\n"


def _exit_now(signum, frame):
    """SIGINT/SIGTERM before the run starts: nothing is open yet, leave at once."""
    os.write(2, INTERRUPTED.encode())
    os._exit(128 + signum)


signal.signal(signal.SIGINT, _exit_now)
signal.signal(signal.SIGTERM, _exit_now)

from absl import app, logging  # noqa: E402 (after the handlers: an import can take seconds)
from ml_collections import config_flags  # noqa: E402

from specjax.cli import validate  # noqa: E402
from specjax.cli.app import ERRORS, error_line  # noqa: E402
from specjax.config_files import loaded_config, parse_flags  # noqa: E402
from specjax.decode import placement, runner  # noqa: E402


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during the run; unwinds so temporary files are removed."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise(signum, frame):
    raise Interrupted(signum)


_CONFIG = config_flags.DEFINE_config_file("config", None, "Decoding config file (configs/*.py).")


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; use --config.<key>=<value>")
    cfg = loaded_config(_CONFIG, "configs/shakespeare.py")
    logging.set_verbosity(logging.WARNING)
    signal.signal(signal.SIGINT, _raise)
    signal.signal(signal.SIGTERM, _raise)
    try:
        validate.check_decode(cfg)  # before waiting for peer processes
        placement.initialize(
            cfg.coordinator_address,
            cfg.num_processes,
            cfg.process_id,
            cfg.num_cpu_devices,
            cfg.init_timeout,
        )
        runner.run(cfg)
    except KeyboardInterrupt as err:
        # Leave without interpreter teardown: tearing JAX down while its runtime threads are
        # still busy can crash (a segfault after the message), and nothing is left to save.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.stdout.flush()
        sys.stderr.write(INTERRUPTED)
        sys.stderr.flush()
        os._exit(128 + getattr(err, "signum", signal.SIGINT))
    except ERRORS as err:
        sys.exit(error_line(err))


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
