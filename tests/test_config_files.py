"""Config files: a file that is missing, a directory, raises, imports a missing module, lacks
``get_config`` or returns None is one ``error:`` line and exit status 1, with or without
overrides (decode, train and distill all parse with ``parse_flags``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags
from ml_collections import config_flags

from specjax.config_files import loaded_config, parse_flags

ROOT = Path(__file__).resolve().parents[1]


def parsed(argv):
    """``parse_flags`` + ``loaded_config`` on a fresh flag set, as a CLI's start-up runs them."""
    fv = flags.FlagValues()
    holder = config_flags.DEFINE_config_file("config", None, "config", flag_values=fv)
    parse_flags(["prog", *argv], fv)
    return loaded_config(holder, "configs/shakespeare.py", fv)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--config", "configs/nope.py"], "config file configs/nope.py not found"),
        (["--config", "BROKEN"], "line 1: invalid syntax"),
        ([], "--config is required"),
    ],
)
def test_config_file_problems(argv, message, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def get_config(:\n")
    with pytest.raises(SystemExit) as exit_info:
        parsed([str(broken) if a == "BROKEN" else a for a in argv])
    line = str(exit_info.value.code)
    assert line.startswith("error:") and "\n" not in line and message in line, line


CONFIG_FILES = {  # a config file's text -> what its one error line says
    "raises.py": ("raise RuntimeError('boom')\n", "raises.py line 1 raised RuntimeError: boom"),
    "imports.py": (
        "import no_such_module_xyz\n\ndef get_config():\n    return {}\n",
        "imports.py line 1 raised ModuleNotFoundError: No module named 'no_such_module_xyz'",
    ),
    "no_get.py": ("X = 1\n", "no_get.py defines no get_config()"),
    "get_raises.py": (
        "def get_config():\n    raise ValueError('bad value')\n",
        "get_config() line 2 raised ValueError: bad value",
    ),
    "returns_none.py": ("def get_config():\n    return None\n", "get_config() returned None"),
    "missing.py": (None, "config file MISSING not found"),
    "a_directory": ("", "is a directory; give a config file"),
}


@pytest.mark.parametrize("override", [[], ["--config.seed=3"]], ids=["alone", "override"])
@pytest.mark.parametrize("name", sorted(CONFIG_FILES))
def test_config_file_that_cannot_load_is_one_line(tmp_path, name, override):
    """A config file that is missing, a directory, raises (itself or in get_config), imports a
    missing module, lacks get_config or returns None: one ``error:`` line and exit status 1,
    with or without overrides (decode, train and distill all parse with ``parse_flags``). These
    used to print 50-55-line tracebacks, or blame an unknown key 'module'."""
    text, message = CONFIG_FILES[name]
    path = tmp_path / name
    if name == "a_directory":
        path.mkdir()
    elif text is not None:
        path.write_text(text)
    for argv in ([f"--config={path}"], ["--config", str(path)]):
        with pytest.raises(SystemExit) as exit_info:
            parsed([*argv, *override])
        line = str(exit_info.value.code)
        want = message.replace("MISSING", str(path))
        assert line.startswith("error: config file ") and "\n" not in line, line
        assert want in line, line


def test_config_file_errors_from_the_command_line(tmp_path):
    """End to end, a missing config file with an override: exit status 1, one stderr line
    (it was a 55-line traceback); train and distill parse their flags the same way."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "specjax.decode",
            "--config",
            str(tmp_path / "no.py"),
            "--config.seed=3",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and out.stdout == "", out
    assert len(lines) == 1 and lines[0].startswith("error: config file") and "not found" in lines[0]
    for script in ("scripts/train.py", "scripts/distill.py", "specjax/decode/__main__.py"):
        assert "flags_parser=parse_flags" in (ROOT / script).read_text(), script
