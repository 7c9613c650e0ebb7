"""From a config record to a ready server (what ``python -m specjax.serve`` runs): models loaded
as ``python -m specjax.decode`` loads them, the engine started, the app and its HTTP server
built. It lives with the applications: :mod:`specjax.serve` itself knows nothing of configs."""

from __future__ import annotations

import logging
import time

from specjax.serve.config import serve_config, with_serve_keys
from specjax.serve.engine import Engine
from specjax.serve.metrics import ServeMetrics

log = logging.getLogger("specjax.serve")


def check_placement(cfg) -> None:
    """Serving runs the models on one device of one process for now."""
    if cfg.mesh_shape or cfg.num_processes != 1 or cfg.coordinator_address:
        raise ValueError(
            "serving runs on one device for now; a mesh or several processes would need the "
            "engine's admissions and cancellations agreed across processes (every process "
            "taking the same decisions, as batch jobs do); unset mesh_shape and num_processes"
        )
    if cfg.mode == "ssd" or cfg.draft_placement == "submesh":
        raise ValueError(
            "serving decodes through continuous batching, which mode=ssd and "
            "draft_placement=submesh do not have; use mode=sd with a replicated draft"
        )


def fixed_widths(cfg) -> None:
    """Sets ``widths=fixed`` where a request at temperature > 0 would need it.

    Any request may sample, and one width chosen for all rows would tie its sample to its
    neighbours (ContinuousBatch refuses it), unless the verifier's output does not depend on
    the widths (gumbel) or every row is greedy (verifier greedy)."""
    adaptive = str(cfg.widths).strip() != "fixed" and cfg.drafter != "none"
    if adaptive and cfg.verifier not in ("gumbel", "greedy"):
        log.info(
            "widths=%s -> fixed: requests may sample, and with verifier %r one width for all rows "
            "would tie a request's sample to its neighbours (verifier gumbel keeps them)",
            cfg.widths,
            cfg.verifier,
        )
        with cfg.unlocked():
            cfg.widths = "fixed"


def build_server(cfg, tokenizer_hook=None):
    """``(server, engine)`` for a decode config (serve keys added where missing): the engine
    is started, the server not yet. ``tokenizer_hook``: called with the tokenizer (tests)."""
    from specjax.cli import validate
    from specjax.cli.decode import build
    from specjax.decode import compile_cache
    from specjax.serve.app import create_app
    from specjax.serve.server import Server

    cfg = with_serve_keys(cfg)
    serve = serve_config(cfg)
    check_placement(cfg)
    fixed_widths(cfg)
    validate.check_decode(cfg)
    compile_cache.configure(cfg.compilation_cache)
    target, tokenizer, drafter, config = build(cfg)
    if tokenizer_hook is not None:
        tokenizer_hook(tokenizer)
    draft_len = 0 if drafter is None or not config.speculative else cfg.num_speculative_tokens
    metrics = ServeMetrics(draft_len)
    engine = Engine(
        target,
        drafter,
        config,
        slots=serve.slots,
        chunk=serve.chunk,
        seed=cfg.seed,
        buckets=validate.shape_buckets(cfg),
        max_queue=serve.max_queue,
        metrics=metrics,
    )
    if serve.warmup_tokens:
        start = time.perf_counter()
        engine.warm_up(serve.warmup_tokens)
        log.info(
            "compiled the programs of prompts up to %d tokens in %.1f s",
            serve.warmup_tokens,
            time.perf_counter() - start,
        )
    engine.start()
    app = create_app(engine, tokenizer, serve)
    return Server(app, engine, serve.host, serve.port, serve.grace_seconds), engine
