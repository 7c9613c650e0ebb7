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
import threading

from absl import app, logging
from ml_collections import config_flags

from specjax.cli import validate
from specjax.cli.app import ERRORS, error_line
from specjax.cli.interrupts import INTERRUPTED
from specjax.config_files import loaded_config, parse_flags
from specjax.decode import placement, runner

# Until main() installs its own handlers, SIGINT/SIGTERM exit at once: the package did that
# before importing JAX (specjax.cli.interrupts.install_early).


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during the run; unwinds so temporary files are removed."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise(signum, frame):
    raise Interrupted(signum)


def _unraisable(hook):
    """An :class:`Interrupted` raised inside a callback Python swallows (a garbage-collection
    callback of JAX's, a ``__del__``) would be lost: send the signal again a moment later, when
    the main thread is back in ordinary code, instead of printing it."""
    if isinstance(hook.exc_value, Interrupted):
        threading.Timer(0.05, os.kill, (os.getpid(), hook.exc_value.signum)).start()
        return
    sys.__unraisablehook__(hook)


_CONFIG = config_flags.DEFINE_config_file("config", None, "Decoding config file (configs/*.py).")


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; use --config.<key>=<value>")
    cfg = loaded_config(_CONFIG, "configs/shakespeare.py")
    logging.set_verbosity(logging.WARNING)
    sys.unraisablehook = _unraisable
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
