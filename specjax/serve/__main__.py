r"""An OpenAI-compatible server from the command line.

  python -m specjax.serve --config configs/tiny_random.py --config.port=8000

Every key of the config file works as for ``python -m specjax.decode``, plus the serve keys
(:data:`specjax.serve.SERVE_KEYS`: host, port, served_model_name, api_key, max_queue, slots,
chunk, max_body_bytes, grace_seconds, warmup_tokens). Errors are one line on stderr and a
non-zero exit.
"""

from __future__ import annotations

import logging as std_logging
import sys

from absl import app, flags, logging
from ml_collections.config_flags import config_flags

from specjax.cli.app import ERRORS, error_line
from specjax.config_files import loaded_config, parse_flags
from specjax.serve.config import serve_config, with_serve_keys


class _ServeConfigParser(config_flags.ConfigFileFlagParser):
    """Loads a decode config file and adds the serve keys, so ``--config.port`` overrides it."""

    def parse(self, path):
        cfg = super().parse(path)
        return with_serve_keys(cfg) if hasattr(cfg, "unlocked") else cfg


# (DEFINE_config_file with the parser above: ml_collections takes no parser argument)
_CONFIG = flags.DEFINE_flag(
    config_flags._ConfigFlag(
        parser=_ServeConfigParser(name="config", lock_config=True),
        serializer=flags.ArgumentSerializer(),
        name="config",
        default=None,
        help_string="Decoding config file (configs/*.py) and the serve keys.",
        flag_values=flags.FLAGS,
        accept_new_attributes=False,
    )
)


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; use --config.<key>=<value>")
    cfg = loaded_config(_CONFIG, "configs/tiny_random.py")
    logging.set_verbosity(logging.WARNING)
    # (absl's handler holds the root logger at WARNING: the server's lines get their own)
    handler = std_logging.StreamHandler(sys.stderr)
    handler.setFormatter(std_logging.Formatter("%(message)s"))
    serve_log = std_logging.getLogger("specjax.serve")
    serve_log.addHandler(handler)
    serve_log.setLevel(std_logging.INFO)
    serve_log.propagate = False
    try:
        serve_config(cfg)  # (a bad serve key fails before JAX loads)
        from specjax.cli.serve import build_server

        server, engine = build_server(cfg)
    except ERRORS as err:
        sys.exit(error_line(err))
    serve_log.info(
        "serving %s on http://%s:%d/v1",
        server.app.state.model_name,
        server.config.host,
        server.config.port,
    )
    server.run()
    if server.exit_code:
        sys.exit(f"error: {engine.failed}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
