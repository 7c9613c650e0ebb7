"""``python -m specjax.calibrate``: measures a pair's width costs into a costs file.

Decoding with ``widths`` weighs each width's expected tokens against its cost relative to a
one-token step (:mod:`specjax.decode.costs`). Measured during a generation, the costs come from
a clock, so at temperature > 0 (verifiers other than ``gumbel``) the library does not measure
them: it guesses. This command measures them once, on this hardware, for the config's pair and
batch bucket, and writes them into the file ``width_costs`` names; a decode run with the same
flags reads them from there, so its widths, and its sample, repeat from run to run.
"""

from __future__ import annotations

import sys

import ml_collections

from specjax.cli import decode, validate, width_keys
from specjax.cli.checks import ConfigError
from specjax.decode import costs as cost_source
from specjax.decode.loop import Run

ROUNDS = 9
"""Rounds measured for a costs file (a generation measuring its own uses fewer)."""


def run(cfg, out=sys.stdout) -> dict:
    """Measures the costs of ``cfg``'s widths and records them; returns the file's entry."""
    path = width_keys.costs_file(cfg)
    if path is None:
        raise ConfigError(
            "calibrate writes a costs file: set --config.width_costs=<name>.json (decode runs "
            "with the same flag read it)"
        )
    plain = ml_collections.ConfigDict(cfg.to_dict())
    plain.width_costs = ""  # (the file may not hold this entry yet)
    validate.check_decode(plain)
    if not width_keys.widths(plain):
        raise ConfigError(
            "calibrate measures the widths a step chooses among; set widths=auto or e.g. 0,2,4"
        )
    mesh, _ = decode.build_mesh(plain)
    target, tokenizer, drafter, config = decode.build(plain, mesh)
    _, prompts = decode.read_prompts(plain, tokenizer)
    batch = (prompts * cfg.batch_size)[: cfg.batch_size]  # the batch the decode runs time
    buckets = validate.shape_buckets(plain)
    run = Run.of(target, drafter, batch, config, cfg.seed, mesh, buckets)
    costs, _ = cost_source.measure(run, run.start(), restart=run.start, rounds=ROUNDS)
    if costs is None:
        raise RuntimeError("no complete round of steps was measured; raise max_new_tokens")
    pair, rows = width_keys.pair_name(cfg), width_keys.batch_bucket(cfg)
    entry = cost_source.record(path, pair, rows, config.widths, costs)
    text = ", ".join(f"{w}: {c:.3f}" for w, c in zip(config.widths, entry["costs"], strict=True))
    out.write(f"{path}: {pair} on {entry['hardware']}, batch {rows}: costs per width {text}\n")
    return entry
