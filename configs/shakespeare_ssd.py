r"""Speculative speculative decoding (SSD, Saguaro) on the default Shakespeare pair.

Command:  python -m specjax.decode --config configs/shakespeare_ssd.py
Variants: --config.ssd_budget=16 --config.ssd_saguaro=0.5   (more branches, Saguaro sampling)
          --config.ssd_backup=ngram                          (the fast backup on a miss)
          --config.ssd_draft_device=next --config.num_cpu_devices=2   (draft on its own device)
Hardware: the 2-core CPU sandbox; no GPU (one device: the rounds run fused, without overlap).
Result:   the metrics table adds the cache hit rate, bonus-guess accuracy and the share of
          rounds served from the cache; BENCHMARKS.md "SSD" has them against the budget C.
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "shakespeare")
    c.mode = "ssd"
    c.verifier = "block"
    c.num_speculative_tokens = 4
    c.ssd_fan_out = "geometric"
    c.ssd_budget = 8
    return c
