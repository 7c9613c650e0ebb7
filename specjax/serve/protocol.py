"""The OpenAI wire format: request bodies as pydantic models, response bodies, and errors."""

from __future__ import annotations

import time
import uuid
from typing import Literal

import pydantic
from pydantic import BaseModel, Field


class ApiError(Exception):
    """An OpenAI-style error: an HTTP status and ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, *, param=None, code=None, headers=None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return {
            401: "authentication_error",
            404: "not_found_error",
            413: "invalid_request_error",
            429: "rate_limit_error",
            503: "service_unavailable",
        }.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")

    def body(self) -> dict:
        error = dict(message=self.message, type=self.type, param=self.param, code=self.code)
        return {"error": error}


MAX_TEMPERATURE = 100.0  # a sane bound (OpenAI's is 2; vLLM has none)


class StreamOptions(BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="ignore")
    include_usage: bool = False


class _Body(BaseModel):
    # Strict: "5" is not a number; unknown keys are ignored, as OpenAI's API does.
    model_config = pydantic.ConfigDict(strict=True, extra="ignore")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    # The ranges every server takes (what a server's verifier or drafter allows: params.py).
    temperature: float | None = Field(default=None, ge=0.0, le=MAX_TEMPERATURE)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)  # -1 (vLLM) and 0: off
    seed: int | None = Field(default=None, ge=-(2**31), lt=2**31)  # the PRNG's int32
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    speculative: bool = True  # specjax's own key: false decodes this request without a draft

    @pydantic.field_validator("stop")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else (stop or [])
        if len(stops) > 4 or not all(stops):
            raise ValueError("stop takes at most 4 non-empty strings")
        return stop

    @property
    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class CompletionRequest(_Body):
    """``POST /v1/completions``."""

    prompt: str | list[int] | list[str]
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None


class TextPart(BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatRequest(_Body):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None


def parse(kind: type[BaseModel], raw: bytes) -> BaseModel:
    """``raw`` JSON as a ``kind``, or a 400 naming the first problem and its key."""
    try:
        return kind.model_validate_json(raw)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        if first["type"] == "json_invalid":
            raise ApiError(400, f"the body is not valid JSON: {first['msg']}") from None
        param = ".".join(str(p) for p in first["loc"] if not _type_tag(p)) or None
        where = f"{param}: " if param else ""
        raise ApiError(400, f"{where}{first['msg']}", param=param) from None


def _type_tag(part) -> bool:
    """Whether a location part names a union member's type (``str``, ``list[int]``), not a key."""
    return isinstance(part, str) and (
        "[" in part or part in ("str", "int", "float", "bool") or part[:1].isupper()
    )


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())
