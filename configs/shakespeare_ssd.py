r"""Speculative speculative decoding (SSD, Saguaro) on the default Shakespeare pair.

Command:  python -m specjax.decode --config configs/shakespeare_ssd.py
Variants: --config.ssd_budget=16 --config.ssd_saguaro=0.5   (more branches, Saguaro sampling)
          --config.ssd_backup=ngram                          (the fast backup on a miss)
          --config.ssd_draft_device=next --config.num_cpu_devices=2   (draft on its own device)
Devices:  on one device the rounds run fused, with no overlap.
Results:  BENCHMARKS.md "Speculative speculative decoding" (scripts/bench_ssd.py).
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
