"""Helpers for ``configs/*.py`` records (imports nothing heavy: configs must not import jax)."""

from __future__ import annotations

import importlib.util
import pathlib


def sibling_config(config_file: str, name: str):
    """``get_config()`` of ``<name>.py`` in the same directory as ``config_file``.

    Lets one config extend another (``configs/smollm2.py`` starts from ``shakespeare.py``)
    however the config was loaded (``config_flags`` loads files by path, not as a package).
    """
    path = pathlib.Path(config_file).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"specjax_config_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()
