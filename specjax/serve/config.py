"""The serve command's keys: the decode keys of a config file, plus where and how to serve."""

from __future__ import annotations

import dataclasses

SERVE_KEYS = dict(
    host="127.0.0.1",
    port=8000,
    served_model_name="",  # "" = the target as given (the config's ``target``)
    api_key="",  # "" = no key; else requests need ``Authorization: Bearer <key>``
    max_queue=64,  # requests waiting for a slot; more get 429
    slots=8,  # rows decoded together
    chunk=8,  # decode steps between two looks at the rows (admissions, cancellations)
    max_body_bytes=1 << 20,  # larger request bodies get 413
    grace_seconds=30.0,  # SIGTERM/SIGINT: in-flight requests finish within this
    warmup_tokens=512,  # programs for prompts up to this long compile before serving (0: none)
)
"""The keys ``python -m specjax.serve`` adds to a decode config, with their defaults."""


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """Where and how to serve (the :data:`SERVE_KEYS`)."""

    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str = "specjax"
    api_key: str = ""
    max_queue: int = 64
    slots: int = 8
    chunk: int = 8
    max_body_bytes: int = 1 << 20
    grace_seconds: float = 30.0
    warmup_tokens: int = 512

    def __post_init__(self):
        for key in ("port", "max_queue", "slots", "chunk", "max_body_bytes", "warmup_tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be an int >= 0, got {value!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if self.slots < 1 or self.chunk < 1 or self.max_body_bytes < 1:
            raise ValueError("slots, chunk and max_body_bytes must be >= 1")
        if not isinstance(self.grace_seconds, int | float) or not self.grace_seconds >= 0:
            raise ValueError(f"grace_seconds must be >= 0, got {self.grace_seconds!r}")
        if not self.served_model_name:
            raise ValueError("served_model_name must not be empty")


def with_serve_keys(cfg):
    """``cfg`` (an ``ml_collections`` decode config) with the :data:`SERVE_KEYS` it lacks."""
    with cfg.unlocked():
        for key, value in SERVE_KEYS.items():
            if key not in cfg:
                setattr(cfg, key, value)
    return cfg


def serve_config(cfg) -> ServeConfig:
    """The :class:`ServeConfig` of a config that has the serve keys."""
    values = {key: cfg[key] for key in SERVE_KEYS}
    values["served_model_name"] = values["served_model_name"] or str(cfg.target)
    values["grace_seconds"] = float(values["grace_seconds"])
    return ServeConfig(**values)
