r"""A tiny random byte-level pair for tests and smoke runs (no files needed): a 2-layer random
target and a different random 2-layer draft built from seeds; outputs are gibberish by design.

Command:  python -m specjax.decode --config configs/tiny_random.py
Hardware: any CPU.
Result:   runs in seconds; greedy output equals autoregressive output
          (--config.temperature=0 --config.compare_autoregressive=True prints "yes").
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "shakespeare")
    c.target = "random:0"
    c.draft = "random:1"
    c.prompt = "Hello"
    c.max_new_tokens = 24
    return c
