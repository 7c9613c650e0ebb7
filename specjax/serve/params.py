"""Request parameters -> an :class:`~specjax.serve.engine.EngineRequest`: the one place that
decides what a request may ask of the engine."""

from __future__ import annotations

import uuid

from specjax.decode.config import DecodeConfig
from specjax.serve.engine import EngineRequest
from specjax.serve.protocol import ApiError, ChatRequest


def engine_request(body, prompt: list[int], config: DecodeConfig) -> EngineRequest:
    """The engine request of an API ``body`` (a completion or chat request) whose prompt
    encodes to ``prompt``; a 400 naming the parameter for what the engine cannot honour.

    Sampling is the server's (``config.sampling``) for every row: a request may repeat it but
    not change it. ``max_tokens`` up to ``config.max_new_tokens`` is honoured by ending the
    row early; a ``seed`` fixes the request's randomness (its draws depend on the server's seed
    and this one alone).
    """
    # TODO(row-sampling): once Request carries sampling, max_new_tokens and seed per row, pass
    # temperature / top_p / top_k / max_tokens / seed through instead of refusing or cutting.
    _refuse_unsupported(body)
    sampling = config.sampling
    top_k = None if body.top_k is None else max(body.top_k, 0)  # -1 (vLLM) and 0: no top-k
    for name, asked, served in (
        ("temperature", body.temperature, sampling.temperature),
        ("top_p", body.top_p, sampling.top_p),
        ("top_k", top_k, sampling.top_k),
    ):
        if asked is not None and abs(asked - served) > 1e-6:
            raise ApiError(
                400,
                f"{name}={asked} differs from this server's {name}={served}: every request is "
                f"sampled with the server's settings for now; omit {name} or send {served}",
                param=name,
                code="unsupported_parameter",
            )
    asked = body.max_tokens
    if isinstance(body, ChatRequest) and body.max_completion_tokens is not None:
        asked = body.max_completion_tokens
    limit = config.max_new_tokens
    if asked is not None and asked > limit:
        raise ApiError(
            400,
            f"max_tokens={asked} exceeds this server's max_new_tokens={limit}",
            param="max_tokens",
            code="unsupported_parameter",
        )
    key_id = ["seed", body.seed] if body.seed is not None else ["request", uuid.uuid4().hex]
    speculative = body.speculative and config.speculative
    return EngineRequest(tuple(prompt), asked or limit, key_id, speculative)


def _refuse_unsupported(body) -> None:
    """A 400 for the OpenAI parameters this server does not implement."""
    chat = isinstance(body, ChatRequest)
    refused = [
        ("n", body.n != 1, "n > 1 (several choices per request) is not supported; send n=1"),
        ("logprobs", bool(body.logprobs), "logprobs are not supported"),
        ("presence_penalty", body.presence_penalty != 0, "presence_penalty is not supported"),
        ("frequency_penalty", body.frequency_penalty != 0, "frequency_penalty is not supported"),
        ("logit_bias", bool(body.logit_bias), "logit_bias is not supported"),
    ]
    if chat:
        refused += [
            ("tools", bool(body.tools), "tools (function calling) are not supported"),
            ("tool_choice", body.tool_choice not in (None, "none"), "tools are not supported"),
            ("top_logprobs", bool(body.top_logprobs), "logprobs are not supported"),
            (
                "response_format",
                body.response_format not in (None, {"type": "text"}),
                "response_format other than text is not supported",
            ),
        ]
    else:
        refused += [
            ("echo", body.echo, "echo is not supported"),
            ("best_of", body.best_of not in (None, 1), "best_of is not supported"),
            ("suffix", bool(body.suffix), "suffix is not supported"),
        ]
    for param, bad, message in refused:
        if bad:
            raise ApiError(400, message, param=param, code="unsupported_parameter")
