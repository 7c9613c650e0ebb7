"""An OpenAI-compatible HTTP server over continuous batching (``python -m specjax.serve``).

The parts: :class:`Engine` (the thread that owns the models), :func:`create_app` (the routes),
:class:`Server` (uvicorn with a drain), :class:`ServeConfig` (where and how);
:func:`specjax.cli.serve.build_server` builds them from a decode config with the serve keys.
"""

from specjax.serve.config import SERVE_KEYS, ServeConfig, serve_config, with_serve_keys
from specjax.serve.engine import Engine, EngineRequest

__all__ = [
    "SERVE_KEYS",
    "Engine",
    "EngineRequest",
    "ServeConfig",
    "serve_config",
    "with_serve_keys",
]


def create_app(*args, **kwargs):
    """:func:`specjax.serve.app.create_app` (FastAPI is imported on first use)."""
    from specjax.serve.app import create_app as create

    return create(*args, **kwargs)
