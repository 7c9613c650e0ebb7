"""The HTTP routes (FastAPI): OpenAI's models, completions and chat completions, streamed as
server-sent events or not, plus ``/health`` and ``/metrics``. Every request is checked here
(body size, JSON, types, model, prompt length, parameters) before it reaches the engine."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from specjax.serve.config import ServeConfig
from specjax.serve.engine import Engine, Failed, Finished, QueueFull, Tokens, Unavailable
from specjax.serve.params import engine_request
from specjax.serve.protocol import ApiError, ChatRequest, CompletionRequest, new_id, now, parse
from specjax.serve.text import TextStream

_POLL = 0.5  # seconds between looks at a non-streamed request's connection


def create_app(engine: Engine, tokenizer, serve: ServeConfig) -> FastAPI:
    """The app serving ``engine`` (started by the caller) as ``serve.served_model_name``."""
    app = FastAPI(title="specjax", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.draining = False
    app.state.model_name = serve.served_model_name
    metrics = engine.metrics

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError):
        metrics.requests.labels(outcome=f"http_{err.status}").inc()
        return JSONResponse(err.body(), err.status, headers=err.headers)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, err: HTTPException):
        return await _api_error(request, ApiError(err.status_code, str(err.detail)))

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        """API key and body size, before any route reads the body."""
        try:
            if request.url.path.startswith("/v1/"):
                _check_key(request, serve.api_key)
                length = request.headers.get("content-length")
                if length is not None and (
                    not length.isdigit() or int(length) > serve.max_body_bytes
                ):
                    raise ApiError(413, f"the body exceeds {serve.max_body_bytes} bytes")
        except ApiError as err:
            return await _api_error(request, err)
        return await call_next(request)

    @app.get("/health")
    async def health():
        if engine.failed or app.state.draining:
            reason = engine.failed or "draining"
            return JSONResponse({"status": "unavailable", "reason": reason}, 503)
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models():
        card = dict(id=serve.served_model_name, object="model", created=0, owned_by="specjax")
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = parse(CompletionRequest, await _body(request, serve.max_body_bytes))
        _check_model(body.model, serve)
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            if len(prompt) != 1:
                raise ApiError(400, "one prompt per request (n = 1)", param="prompt")
            prompt = prompt[0]
        ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        return await _answer(request, body, ids, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = parse(ChatRequest, await _body(request, serve.max_body_bytes))
        _check_model(body.model, serve)
        if not tokenizer.chat_template:
            raise ApiError(
                400, "this model has no chat template: use /v1/completions", param="messages"
            )
        messages = [{"role": m.role, "content": m.text} for m in body.messages]
        try:
            ids = tokenizer.encode_chat(messages)
        except ValueError as err:
            raise ApiError(400, str(err), param="messages") from None
        return await _answer(request, body, ids, chat=True)

    async def _answer(request: Request, body, ids: list[int], chat: bool):
        if app.state.draining:
            raise ApiError(503, "the server is shutting down")
        why = engine.problem(ids)
        if why:
            code = "context_length_exceeded" if "max_seq_len" in why else None
            raise ApiError(400, why, param="messages" if chat else "prompt", code=code)
        job = engine_request(body, ids, engine)
        loop, events = asyncio.get_running_loop(), asyncio.Queue()
        try:
            ticket = engine.submit(job, lambda e: loop.call_soon_threadsafe(events.put_nowait, e))
        except QueueFull as err:
            raise ApiError(
                429, f"the queue is full ({err}); retry later", headers={"Retry-After": "1"}
            ) from None
        except Unavailable as err:
            raise ApiError(503, str(err)) from None
        reply = _Reply(body, chat, serve.served_model_name)
        text = TextStream(tokenizer, body.stops)
        if body.stream:
            include = body.stream_options is not None and body.stream_options.include_usage
            gen = _events(engine, ticket, events, text, reply, include, metrics)
            return StreamingResponse(gen, media_type="text/event-stream")
        parts = []
        while True:
            try:
                event = await asyncio.wait_for(events.get(), _POLL)
            except TimeoutError:
                if await request.is_disconnected():
                    engine.cancel(ticket)
                    metrics.requests.labels(outcome="cancelled").inc()
                    return Response(status_code=499)
                continue
            if isinstance(event, Failed):
                raise ApiError(event.status, event.message)
            if isinstance(event, Tokens):
                parts.append(text.push(event.ids))
                if text.stopped and not ticket.ending:
                    engine.end_early(ticket)  # (its Finished, with the counts, comes next)
            if isinstance(event, Finished):
                event = _stopped(event, text)
                parts.append(text.finish())
                metrics.requests.labels(outcome=event.finish_reason).inc()
                return reply.whole("".join(parts), event)

    return app


async def _events(engine, ticket, events, text, reply, include_usage, metrics):
    """The server-sent events of a streamed request; a client that leaves cancels it."""
    done = False
    try:
        if reply.chat:
            yield reply.sse(reply.chunk(role=True))
        while not done:
            event = await events.get()
            if isinstance(event, Failed):
                done = True
                metrics.requests.labels(outcome="error").inc()
                yield reply.sse(ApiError(event.status, event.message).body())
                break
            if isinstance(event, Tokens):
                delta = text.push(event.ids)
                if delta:
                    yield reply.sse(reply.chunk(delta))
                if text.stopped and not ticket.ending:
                    engine.end_early(ticket)
            if isinstance(event, Finished):
                event = _stopped(event, text)
                done = True
                metrics.requests.labels(outcome=event.finish_reason).inc()
                rest = text.finish()
                yield reply.sse(reply.chunk(rest, finish=event.finish_reason))
                if include_usage:
                    yield reply.sse(reply.chunk(None, usage=_usage(event)))
        yield "data: [DONE]\n\n"
    finally:
        if not done:  # the client left (the task was cancelled) or the loop ended
            engine.cancel(ticket)
            metrics.requests.labels(outcome="cancelled").inc()


def _stopped(finished: Finished, text: TextStream) -> Finished:
    """``finished`` as the client saw it: a request cut by a stop string ended there (its ids
    up to the stop string's; the counts are its row's)."""
    if not text.stopped:
        return finished
    return dataclasses.replace(finished, finish_reason="stop", completion_tokens=len(text.ids))


class _Reply:
    """Response bodies of one request (ids, object names, the model)."""

    def __init__(self, body, chat: bool, model: str):
        self.chat, self.model = chat, model
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = now()

    def whole(self, text: str, finished: Finished) -> dict:
        if self.chat:
            message = {"role": "assistant", "content": text}
            choice = dict(index=0, message=message, logprobs=None)
            kind = "chat.completion"
        else:
            choice, kind = dict(index=0, text=text, logprobs=None), "text_completion"
        choice["finish_reason"] = finished.finish_reason
        return dict(
            id=self.id,
            object=kind,
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=_usage(finished),
        )

    def chunk(self, delta: str | None = "", finish: str | None = None, role=False, usage=None):
        if usage is not None:
            choices = []
        elif self.chat:
            part = {"role": "assistant", "content": ""} if role else {"content": delta}
            choices = [dict(index=0, delta=part, logprobs=None, finish_reason=finish)]
        else:
            choices = [dict(index=0, text=delta, logprobs=None, finish_reason=finish)]
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        out = dict(id=self.id, object=kind, created=self.created, model=self.model, choices=choices)
        if usage is not None:
            out["usage"] = usage
        return out

    @staticmethod
    def sse(payload: dict) -> str:
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _usage(finished: Finished) -> dict:
    """OpenAI's usage, and the speculative counts under vLLM's names."""
    return dict(
        prompt_tokens=finished.prompt_tokens,
        completion_tokens=finished.completion_tokens,
        total_tokens=finished.prompt_tokens + finished.completion_tokens,
        num_accepted_tokens=finished.accepted_tokens,
        num_draft_tokens=finished.proposed_tokens,
        num_target_forwards=finished.target_forwards,
    )


async def _body(request: Request, limit: int) -> bytes:
    """The body, at most ``limit`` bytes (413 past it, whatever Content-Length said)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _check_key(request: Request, key: str) -> None:
    if not key:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(
        token.strip().encode(), key.encode()
    ):
        raise ApiError(
            401, "a valid API key is required: Authorization: Bearer <key>", code="invalid_api_key"
        )


def _check_model(model: str, serve: ServeConfig) -> None:
    if model != serve.served_model_name:
        raise ApiError(
            404,
            f"the model {model!r} does not exist; this server serves {serve.served_model_name!r}",
            param="model",
            code="model_not_found",
        )
