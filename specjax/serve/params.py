"""Request parameters -> an :class:`~specjax.serve.engine.EngineRequest`: the one place that
decides what a request may ask of the engine."""

from __future__ import annotations

import uuid

from specjax.serve.engine import Engine, EngineRequest
from specjax.serve.protocol import ApiError, ChatRequest

# The API parameter of a field of the engine's requests (ContinuousBatch.value_problem).
_PARAMS = dict(temperature="temperature", top_p="top_p", top_k="top_k", seed="seed")
_PARAMS["max_new_tokens"] = "max_tokens"


def engine_request(body, prompt: list[int], engine: Engine) -> EngineRequest:
    """The engine request of an API ``body`` (a completion or chat request) whose prompt
    encodes to ``prompt``; a 400 naming the parameter for what the engine cannot honour.

    ``temperature``, ``top_p`` and ``top_k`` (vLLM's -1: off) are the request's own sampling,
    the server's where omitted; ``max_tokens`` ends the request's row (at most the server's
    ``max_new_tokens``); a ``seed`` gives the draws ``generate([prompt], config, seed=seed)``
    gives, whatever runs beside it. Unseeded requests draw from a fresh id.
    """
    _refuse_unsupported(body)
    config = engine.config
    asked = body.max_tokens
    if isinstance(body, ChatRequest) and body.max_completion_tokens is not None:
        asked = body.max_completion_tokens
    limit = config.max_new_tokens
    if asked is not None and asked > limit:
        raise ApiError(
            400,
            f"max_tokens={asked} exceeds this server's max_new_tokens={limit} (which sizes its "
            f"caches); ask for at most {limit} or start the server with a larger max_new_tokens",
            param="max_tokens",
            code="unsupported_parameter",
        )
    own = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": None if body.top_k is None else max(body.top_k, 0),  # -1 (vLLM): off
    }
    own = {key: value for key, value in own.items() if value is not None}
    job = EngineRequest(
        tuple(prompt),
        asked or limit,
        ["request", uuid.uuid4().hex],
        body.speculative and config.speculative,
        sampling=own or None,  # (the server's values where omitted)
        seed=body.seed,
    )
    field, why = engine.value_problem(job)
    if why:
        raise ApiError(400, why, param=_PARAMS.get(field), code="unsupported_parameter")
    return job


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
