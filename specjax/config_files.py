"""Helpers for ``configs/*.py`` records (imports nothing heavy: configs must not import jax)."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

from specjax.errors import first_line


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


def config_file_problem(value: str) -> str | None:
    """The ``error:`` line for a ``--config`` value whose file cannot give a config, or None.

    Loads the file as ml_collections would (``path`` or ``path:argument``, ``get_config`` called
    with the argument): a missing file, a directory, a syntax error, an import or any other
    exception while running the file or its ``get_config()``, no ``get_config``, or one that
    returns None. ml_collections itself defers a missing file's error until the config is
    used (an override then prints a 55-line traceback) and lets a file's own exception through.
    """
    path_text, colon, argument = value.partition(":")
    path = pathlib.Path(path_text).expanduser()
    if not path.exists():
        return f"error: config file {path_text} not found; give the path of a config file"
    if not path.is_file():
        return f"error: config file {path_text} is a directory; give a config file (.py)"
    try:
        spec = importlib.util.spec_from_file_location(f"specjax_config_check_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except SyntaxError as err:
        return f"error: config file {err.filename} line {err.lineno}: {err.msg}; fix its syntax"
    except Exception as err:  # a config file may raise anything
        where = _where(err, path)
        return f"error: config file {path_text}{where} raised {first_line(err)}; fix the file"
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        return (
            f"error: config file {path_text} defines no get_config(); a config file's "
            "get_config() returns its ConfigDict (see configs/shakespeare.py)"
        )
    try:
        config = get_config(*([argument] if colon else []))
    except Exception as err:
        where = _where(err, path)
        return (
            f"error: config file {path_text}: get_config(){where} raised {first_line(err)}; "
            "fix the file"
        )
    if config is None:
        return f"error: config file {path_text}: get_config() returned None; return the config"
    return None


def _where(err: BaseException, path: pathlib.Path) -> str:
    """`` line N``: the config file's line in ``err``'s traceback (innermost), or ``""``."""
    tb, line = err.__traceback__, None
    while tb is not None:
        if pathlib.Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return "" if line is None else f" line {line}"


def _config_file_values(argv, flag_values) -> list[str]:
    """The values given on ``argv`` to the config-file flags of ``flag_values``."""
    from ml_collections.config_flags import config_flags

    names = [
        name
        for name in flag_values
        if isinstance(flag_values[name].parser, config_flags.ConfigFileFlagParser)
    ]
    values = []
    args = list(argv[1:])
    for i, arg in enumerate(args):
        if arg == "--":
            break
        for name in names:
            for dashes in ("--", "-"):
                if arg == f"{dashes}{name}" and i + 1 < len(args):
                    values.append(args[i + 1])
                elif arg.startswith(f"{dashes}{name}="):
                    values.append(arg.split("=", 1)[1])
    return values


def parse_flags(argv, flag_values=None):
    """absl flag parsing for the CLIs (``app.run(main, flags_parser=parse_flags)``): every
    problem with ``--config`` or an override is one ``error:`` line and exit status 1.

    The config file is checked first (:func:`config_file_problem`), so that a file that is
    missing, broken or raising gives its own line whatever overrides follow it.

    Args:
      argv: the command line, program name first.
      flag_values: the ``absl.flags.FlagValues`` to parse into (default: the global FLAGS).
    """
    from absl import flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    for value in _config_file_values(argv, flag_values):
        problem = config_file_problem(value)
        if problem:
            sys.exit(problem)
    try:
        return flag_values(argv)
    except (KeyError, AttributeError) as err:  # ml_collections: an override of a missing key
        sys.exit(_key_error_message(err))
    except SyntaxError as err:
        sys.exit(f"error: config file {err.filename} line {err.lineno}: {err.msg}; fix its syntax")
    except (flags.Error, ValueError, TypeError, OSError) as err:
        sys.exit(f"error: {_first_text_line(err)}")


def _first_text_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


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
