"""Shared pieces of the server tests: the tiny random pair's config and an HTTP helper."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from specjax.config_files import load_config

CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def tiny_config(**overrides):
    """``configs/tiny_random.py`` with the serve keys for a test server (any free port).

    Its shapes are few, so a server compiles once: two slots (inserts of 1 and 2 rows), one
    prompt bucket, 32 new tokens at most."""
    from specjax.serve import with_serve_keys

    cfg = with_serve_keys(load_config("configs/tiny_random.py"))
    values = dict(
        port=0,
        slots=2,
        chunk=4,
        max_new_tokens=32,
        prompt_buckets="128",
        widths="fixed",
        temperature=0.0,
        seed=3,
        warmup_tokens=0,  # (test_serve's warm-up test warms its own engine)
    )
    values.update(overrides)
    for key, value in values.items():
        cfg[key] = value
    return cfg


def add_chat_template(tokenizer) -> None:
    tokenizer.chat_template = CHATML


def call(port: int, path: str, body=None, headers=None, method=None, raw: bytes | None = None):
    """``(status, headers (any case), parsed JSON or text)`` of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method or ("POST" if data else "GET")
    )
    request.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, head, text = response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        status, head, text = err.code, err.headers, err.read()
    text = text.decode()
    try:
        return status, head, json.loads(text)
    except json.JSONDecodeError:
        return status, head, text


def sse_events(text: str) -> list:
    """The ``data:`` payloads of a server-sent event stream (``[DONE]`` as the string)."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
