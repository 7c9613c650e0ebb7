r"""A tiny random byte-level pair for tests and smoke runs (no files needed): a 2-layer random
target and a different random 2-layer draft built from seeds; outputs are gibberish by design.

Command:  python -m specjax.decode --config configs/tiny_random.py
Result:   runs in seconds on a CPU; greedy output equals autoregressive output
          (--config.temperature=0 --config.compare_autoregressive=True prints "yes").
"""

import importlib.util
import pathlib


def get_config():
    path = pathlib.Path(__file__).with_name("shakespeare.py")
    spec = importlib.util.spec_from_file_location("shakespeare_config", path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    c = base.get_config()
    c.target = "random:0"
    c.draft = "random:1"
    c.prompt = "Hello"
    c.max_new_tokens = 24
    return c
