"""Helpers for ``configs/*.py`` records (imports nothing heavy: configs must not import jax)."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys


def load_config(path: str | pathlib.Path):
    """``get_config()`` of the config file at ``path`` (as ``--config path`` would load it)."""
    path = pathlib.Path(path)
    spec = importlib.util.spec_from_file_location(f"specjax_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def sibling_config(config_file: str, name: str):
    """``get_config()`` of ``<name>.py`` in the same directory as ``config_file``.

    Lets one config extend another (``configs/smollm2.py`` starts from ``shakespeare.py``)
    however the config was loaded (``config_flags`` loads files by path, not as a package).
    """
    return load_config(pathlib.Path(config_file).with_name(f"{name}.py"))


def _key_error_message(err: BaseException) -> str:
    """``error: unknown config key ...`` from ml_collections' KeyError/AttributeError text."""
    text = err.args[0] if err.args else str(err)
    text = str(text)
    key = re.search(r"""['"]?([A-Za-z_][\w.]*)['"]?""", text)
    hint = re.search(r'Did you mean "([^"]+)"', text)
    name = key.group(1) if key else text
    message = f"error: unknown config key {name!r}"
    if hint:
        message += f" (did you mean {hint.group(1)!r}?)"
    return message + "; the keys are those of the config file"


def parse_flags(argv, flag_values=None):
    """absl flag parsing for the CLIs (``app.run(main, flags_parser=parse_flags)``): every
    problem with ``--config`` or an override is one ``error:`` line and exit status 1.

    Args:
      argv: the command line, program name first.
      flag_values: the ``absl.flags.FlagValues`` to parse into (default: the global FLAGS).
    """
    from absl import flags

    try:
        return (flags.FLAGS if flag_values is None else flag_values)(argv)
    except (KeyError, AttributeError) as err:  # ml_collections: an override of a missing key
        sys.exit(_key_error_message(err))
    except SyntaxError as err:
        sys.exit(f"error: config file {err.filename} line {err.lineno}: {err.msg}; fix its syntax")
    except (flags.Error, ValueError, TypeError) as err:
        sys.exit(f"error: {str(err).splitlines()[0]}")


def loaded_config(holder, example: str, flag_values=None):
    """The config of a ``DEFINE_config_file`` flag, or exit with one ``error:`` line when it is
    missing or its file could not be loaded (ml_collections defers that error to first use).

    Args:
      holder: the flag holder returned by ``config_flags.DEFINE_config_file``.
      example: a config path for the message, e.g. ``configs/shakespeare.py``.
      flag_values: the ``absl.flags.FlagValues`` holding the flag (default: the global FLAGS).
    """
    from absl import flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    cfg = holder.value
    if cfg is None:
        sys.exit(f"error: --config is required, e.g. --config {example}")
    try:
        cfg.keys()
    except Exception as err:
        path = flag_values[holder.name].config_filename if holder.name in flag_values else "?"
        cause = err.__cause__ or err
        if isinstance(cause, FileNotFoundError) or "No such file" in str(err):
            sys.exit(f"error: config file {path} not found; give a path like {example}")
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        sys.exit(f"error: config file {path} could not be loaded: {first}")
    return cfg
