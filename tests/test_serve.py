"""The OpenAI-compatible server in-process on the tiny random pair: the API's answers, their
equality with offline decoding, concurrency, bad input, cancellation and a full queue."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import json
import threading
import time

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from specjax.cli.serve import build_server  # noqa: E402
from specjax.decode.batching import ContinuousBatch, Request  # noqa: E402
from tests.serve_fixtures import add_chat_template, call, sse_events, tiny_config  # noqa: E402

MODEL = "random:0"


def _start(**overrides):
    cfg = tiny_config(**overrides)
    server, engine = build_server(cfg, tokenizer_hook=add_chat_template)
    return server.start(), engine, cfg


@pytest.fixture(scope="module")
def greedy():
    server, engine, cfg = _start()
    yield server, engine, cfg
    server.drain()
    server.join(30)


@pytest.fixture(scope="module")
def sampled():
    server, engine, cfg = _start(temperature=1.0, max_new_tokens=24, api_key="sekrit")
    yield server, engine, cfg
    server.drain()
    server.join(30)


def _client(server, key="none"):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=key, max_retries=0)


def _offline(cfg, prompts):
    """What offline continuous batching decodes for ``prompts`` with the server's models, config
    and shapes (per-row values, as the server: its programs are the server's, nothing compiles
    again)."""
    from specjax.cli import validate
    from specjax.cli.decode import build

    target, tokenizer, drafter, config = build(cfg)
    batch = ContinuousBatch(
        target,
        drafter,
        config,
        slots=cfg.slots,
        seed=cfg.seed,
        buckets=validate.shape_buckets(cfg),
        chunk=cfg.chunk,
        rows=True,
    )
    requests = [Request(i, ids) for i, ids in enumerate(prompts)]
    done = sorted(batch.run(requests), key=lambda c: c.index)
    return tokenizer, [c.token_ids for c in done]


def test_models_health_and_metrics(greedy):
    server, _, _ = greedy
    status, _, body = call(server.port, "/v1/models")
    assert status == 200 and body["data"][0]["id"] == MODEL
    assert call(server.port, "/health")[:1] == (200,)
    _client(server).completions.create(model=MODEL, prompt="Hi", max_tokens=3)
    status, _, text = call(server.port, "/metrics")
    for name in (
        'specjax_requests_total{outcome="length"}',
        "specjax_queue_depth",
        "specjax_busy_slots",
        "specjax_prompt_tokens_total",
        "specjax_generation_tokens_total",
        "specjax_tokens_per_target_forward",
        "specjax_acceptance_length_bucket",
        "specjax_time_to_first_token_seconds_bucket",
        "specjax_inter_token_latency_seconds_bucket",
    ):
        assert name in text, name


def test_greedy_output_is_offline_output_cut_at_max_tokens(greedy):
    server, engine, cfg = greedy
    client = _client(server)
    answer = client.completions.create(model=MODEL, prompt="Hello", max_tokens=24)
    whole = client.completions.create(model=MODEL, prompt="Hi there").choices[0]
    tokenizer, (ids, other) = _offline(cfg, [list(b"Hello"), list(b"Hi there")])
    assert answer.choices[0].text == tokenizer.decode(ids[:24])
    assert answer.choices[0].finish_reason == "length"
    shown = [t for t in other if t not in engine.config.stop_tokens]
    assert whole.text == tokenizer.decode(shown)  # (ended by its row, not by max_tokens)
    usage = answer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 24, 29)
    assert usage.model_extra["num_target_forwards"] >= 1
    assert "num_accepted_tokens" in usage.model_extra and "num_draft_tokens" in usage.model_extra


def test_streamed_deltas_join_to_the_whole_text(greedy):
    server, _, _ = greedy
    client = _client(server)
    whole = client.completions.create(model=MODEL, prompt="abc", max_tokens=30).choices[0].text
    chunks = list(client.completions.create(model=MODEL, prompt="abc", max_tokens=30, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole
    assert chunks[-1].choices[0].finish_reason == "length"
    messages = [{"role": "user", "content": "hi"}]
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts = list(stream)
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert text == chat.choices[0].message.content
    assert parts[-1].usage.completion_tokens == chat.usage.completion_tokens == 20


def test_raw_stream_ends_with_done(greedy):
    server, _, _ = greedy
    body = dict(model=MODEL, prompt="xy", max_tokens=5, stream=True)
    status, head, text = call(server.port, "/v1/completions", body)
    assert status == 200 and head["content-type"].startswith("text/event-stream")
    events = sse_events(text)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"


def test_stop_string_cuts_the_text_exactly_and_keeps_the_counts(greedy):
    server, _, _ = greedy
    client = _client(server)
    full = client.completions.create(model=MODEL, prompt="stop", max_tokens=32).choices[0].text
    k = next(
        i
        for i in range(5, 24)
        if "\ufffd" not in full[i : i + 2] and full.find(full[i : i + 2]) == i
    )
    stop = full[k : k + 2]
    cut = client.completions.create(model=MODEL, prompt="stop", max_tokens=32, stop=[stop])
    assert cut.choices[0].text == full[:k] and cut.choices[0].finish_reason == "stop"
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="stop",
            max_tokens=32,
            stop=stop,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full[:k]
    for usage in (cut.usage, chunks[-1].usage):  # the row's counts, read before it ended
        assert usage.model_extra["num_target_forwards"] >= 1, usage
        assert usage.model_extra["num_draft_tokens"] >= usage.model_extra["num_target_forwards"]
        assert 0 < usage.completion_tokens <= 32


def test_speculation_off_for_one_request_gives_the_same_greedy_text(greedy):
    server, _, _ = greedy
    client = _client(server)
    spec = client.completions.create(model=MODEL, prompt="same", max_tokens=16)
    plain = client.completions.create(
        model=MODEL, prompt="same", max_tokens=16, extra_body={"speculative": False}
    )
    assert plain.choices[0].text == spec.choices[0].text
    assert plain.usage.model_extra["num_draft_tokens"] == 0


def _concurrent_equals_alone(server, key, seeded: bool, own=lambda i: {}):
    """16 requests at once each answer as alone; ``own(i)``: request i's own parameters."""
    client = _client(server, key)
    jobs = [("p" * (1 + 7 * i), 3 + i, own(i)) for i in range(16)]  # prompts of 1 to 106 bytes
    ask = lambda job: (
        client.completions.create(
            model=MODEL,
            prompt=job[0],
            max_tokens=job[1],
            seed=(11 + len(job[0])) if seeded else None,
            extra_body=job[2],  # (top_k is not an OpenAI parameter)
        )
        .choices[0]
        .text
    )
    alone = [ask(job) for job in jobs[::5]]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(ask, jobs))
    assert together[::5] == alone
    return together


def test_sixteen_concurrent_greedy_requests_equal_each_alone(greedy):
    server, _, _ = greedy
    _concurrent_equals_alone(server, "none", seeded=False)


OWN = [
    {},
    {"temperature": 0.0},
    {"temperature": 0.5, "top_p": 0.9},
    {"temperature": 1.7, "top_k": 5},
]


def test_sixteen_concurrent_seeded_requests_with_their_own_values_equal_each_alone(sampled, greedy):
    server, _, _ = sampled
    first = _concurrent_equals_alone(server, "sekrit", True, own=lambda i: OWN[i % 4])
    # the temperature-0 rows, decoded beside temperature-1 rows, are the greedy server's
    plain = _client(greedy[0])
    for i in range(1, 16, 4):
        alone = plain.completions.create(model=MODEL, prompt="p" * (1 + 7 * i), max_tokens=3 + i)
        assert first[i] == alone.choices[0].text, i
    client = _client(server, "sekrit")
    again = client.completions.create(model=MODEL, prompt="p", max_tokens=3, seed=12)
    assert again.choices[0].text == first[0]
    other = [
        client.completions.create(model=MODEL, prompt="q", max_tokens=24, seed=s) for s in (1, 2)
    ]
    assert other[0].choices[0].text != other[1].choices[0].text  # (24 random bytes)


def test_a_seeded_request_equals_offline_generate_with_its_values(sampled):
    """Without a draft (``speculative: false``) a seeded request's tokens are those of
    ``generate([prompt], config, seed=seed)`` at its temperature, top-k, top-p and length."""
    from specjax.cli.decode import build
    from specjax.decode import generate
    from specjax.sampling import SamplingParams

    server, _, cfg = sampled
    values = dict(temperature=0.8, top_k=20, top_p=0.95)
    answer = _client(server, "sekrit").completions.create(
        model=MODEL,
        prompt="seeded",
        max_tokens=12,
        seed=77,
        extra_body={"speculative": False, **values},
    )
    target, tokenizer, _, config = build(cfg)
    own = dataclasses.replace(
        config.autoregressive(), sampling=SamplingParams(**values), max_new_tokens=12
    )
    ids = generate(target, [tokenizer.encode("seeded")], own, seed=77).tokens[0]
    shown = [t for t in ids if t not in config.stop_tokens]
    assert answer.choices[0].text == tokenizer.decode(shown)
    assert answer.usage.completion_tokens == len(ids)


@pytest.mark.slow  # (the loop's drafter invariance: tests/test_drafter_invariance.py)
def test_a_gumbel_server_with_adaptive_widths_gives_each_seed_its_autoregressive_sample(greedy):
    """Verifier ``gumbel`` keeps adaptive widths in a per-row server: a seeded sampled request's
    text is the same with speculation on and off (drafter-invariant), concurrently too, and a
    temperature-0 request is the greedy server's."""
    server, _, _ = _start(verifier="gumbel", widths="auto", temperature=1.0)
    try:
        client = _client(server)
        ask = lambda i, spec: (
            client.completions.create(
                model=MODEL,
                prompt="g" * (1 + 5 * i),
                max_tokens=20,
                seed=40 + i,
                extra_body={"speculative": spec, **OWN[i % 4]},
            )
            .choices[0]
            .text
        )
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            spec = list(pool.map(lambda i: ask(i, True), range(8)))
        plain = [ask(i, False) for i in range(8)]
        assert spec == plain
        greedy_text = _client(greedy[0]).completions.create(model=MODEL, prompt="g", max_tokens=20)
        zero = client.completions.create(model=MODEL, prompt="g", max_tokens=20, temperature=0.0)
        assert zero.choices[0].text == greedy_text.choices[0].text
    finally:
        server.drain()
        server.join(30)


BAD = [
    # (body or raw bytes, status, param)
    (b"{not json", 400, None),
    ({"model": MODEL, "prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": 5}, 400, "prompt"),
    ({"model": MODEL, "prompt": "x", "temperature": -1.0}, 400, "temperature"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"model": "gpt-4", "prompt": "x"}, 404, "model"),
    ({"model": MODEL, "prompt": "x" * 2000}, 400, "prompt"),
    ({"model": MODEL, "prompt": [300]}, 400, "prompt"),
    ({"model": MODEL, "prompt": "x", "n": 2}, 400, "n"),
    ({"model": MODEL, "prompt": "x", "logprobs": 2}, 400, "logprobs"),
    ({"model": MODEL, "prompt": "x", "temperature": 101.0}, 400, "temperature"),
    ({"model": MODEL, "prompt": "x", "top_p": 0.0}, 400, "top_p"),
    ({"model": MODEL, "prompt": "x", "top_p": 1.5}, 400, "top_p"),
    ({"model": MODEL, "prompt": "x", "top_k": -2}, 400, "top_k"),
    ({"model": MODEL, "prompt": "x", "seed": 2**31}, 400, "seed"),
    ({"model": MODEL, "prompt": "x", "seed": -(2**31) - 1}, 400, "seed"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 25}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "stop": [""]}, 400, "stop"),
    ({"model": MODEL}, 400, "prompt"),
]


@pytest.mark.parametrize("body,status,param", BAD)
def test_bad_completion_requests_get_4xx(sampled, body, status, param):
    server, engine, _ = sampled
    before = engine.in_flight
    raw = body if isinstance(body, bytes) else None
    got, _, answer = call(
        server.port,
        "/v1/completions",
        None if raw else body,
        {"Authorization": "Bearer sekrit"},
        raw=raw,
    )
    assert got == status, answer
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert answer["error"]["param"] == param and answer["error"]["message"]
    assert engine.in_flight == before


def test_a_greedy_verifier_refuses_sampled_requests(greedy):
    """Verifier ``greedy`` is exact at temperature 0 only: a sampled request is a 400 naming
    temperature (without a draft it may sample)."""
    from specjax.cli.decode import build
    from specjax.serve import Engine
    from specjax.serve.params import engine_request
    from specjax.serve.protocol import ApiError, CompletionRequest

    target, _, drafter, config = build(tiny_config(verifier="greedy"))
    engine = Engine(target, drafter, config, slots=2)  # (never started: nothing compiles)
    ask = lambda **values: engine_request(
        CompletionRequest(model=MODEL, prompt="x", **values), [120], engine
    )
    with pytest.raises(ApiError) as refused:
        ask(temperature=0.5)
    assert refused.value.status == 400 and refused.value.param == "temperature"
    assert "verifier 'greedy'" in refused.value.message
    assert ask(temperature=0.0, max_tokens=4, seed=1).max_tokens == 4
    assert not ask(temperature=0.5, speculative=False).speculative


def test_a_warmed_up_engine_admits_requests_without_compiling():
    """``warm_up`` compiles every program the slots run for prompts up to its length: requests
    arriving alone and together, short and long, speculative or not, then compile nothing."""
    import jax

    from specjax.cli import validate
    from specjax.cli.decode import build
    from specjax.serve import Engine, EngineRequest
    from specjax.serve.engine import Finished

    cfg = tiny_config(slots=2, prompt_buckets="16,32", max_new_tokens=8)
    target, _, drafter, config = build(cfg)
    buckets = validate.shape_buckets(cfg)
    engine = Engine(target, drafter, config, slots=2, chunk=4, buckets=buckets)
    engine.warm_up(32)
    traced, on = [], [True]  # every program traced (compiled or read from the persistent cache)
    listen = lambda event, seconds, **_: traced.append(event) if on[0] else None
    jax.monitoring.register_event_duration_secs_listener(listen)
    engine.start()
    rng = np.random.default_rng(0)

    def wave(lengths, speculative=lambda i: True):
        done, events = threading.Event(), []

        def sink(event):
            if isinstance(event, Finished):
                events.append(event)
                if len(events) == len(lengths):
                    done.set()

        for i, n in enumerate(lengths):
            prompt = tuple(int(t) for t in rng.integers(1, 100, n))
            engine.submit(EngineRequest(prompt, 8, ("w", len(events), i), speculative(i)), sink)
        assert done.wait(120)

    wave([5])
    wave([30, 3, 17])
    wave([12, 31, 2, 20], speculative=lambda i: i % 2 == 0)
    wave([9, 25])
    engine.stop()
    assert engine.join(30)
    on[0] = False
    assert "/jax/core/compile/jaxpr_trace_duration" not in traced


def test_a_new_request_hears_of_its_first_token_after_one_step(greedy):
    """The engine decodes a chunk (4 steps here) between two looks at the rows, except right
    after an admission: a new request's first ids come after one step (its time to first
    token is its prefill and one step, not a chunk)."""
    from specjax.serve import EngineRequest
    from specjax.serve.engine import Finished, Tokens

    _, engine, _ = greedy
    done, events = threading.Event(), []

    def sink(event):
        events.append(event)
        if isinstance(event, Finished):
            done.set()

    engine.submit(EngineRequest((5, 6, 7, 8), 12, "first", speculative=False), sink)
    assert done.wait(60)
    sizes = [len(e.ids) for e in events if isinstance(e, Tokens)]
    assert sizes[0] == 1 and sizes[1:3] == [4, 4], sizes  # then a chunk at a time
    assert events[-1].completion_tokens == 12


def test_adaptive_widths_become_fixed_unless_the_sample_cannot_depend_on_them(caplog):
    from specjax.cli.serve import fixed_widths

    for verifier, widths in (("block", "fixed"), ("gumbel", "auto"), ("greedy", "auto")):
        cfg = tiny_config(widths="auto", verifier=verifier)
        with caplog.at_level("INFO", "specjax.serve"):
            fixed_widths(cfg)
        assert cfg.widths == widths, verifier
    assert len(caplog.records) == 1 and "widths=auto -> fixed" in caplog.text


def test_bad_chat_requests_size_and_key(sampled):
    server, _, _ = sampled
    key = {"Authorization": "Bearer sekrit"}
    user = [{"role": "user", "content": "hi"}]
    cases = [
        ({"model": MODEL, "messages": user, "tools": [{"type": "function"}]}, key, 400),
        ({"model": MODEL, "messages": []}, key, 400),
        ({"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}, key, 400),
        ({"model": MODEL, "messages": user}, {}, 401),
        ({"model": MODEL, "messages": user}, {"Authorization": "Bearer wrong"}, 401),
    ]
    for body, headers, status in cases:
        got, _, answer = call(server.port, "/v1/chat/completions", body, headers)
        assert got == status and "message" in answer["error"], (body, answer)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.putrequest("POST", "/v1/completions")
    connection.putheader("Authorization", "Bearer sekrit")
    connection.putheader("Content-Length", str(2 << 20))  # (answered before the body comes)
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and json.loads(response.read())["error"]["message"]
    connection.close()


def test_dropped_streams_free_their_slot_and_their_place_in_the_queue(greedy, monkeypatch):
    from specjax.serve import engine as engine_module

    gate, stepping, admitted = threading.Event(), threading.Event(), []

    class Gated(engine_module.Slots):
        """Decodes nothing until the clients have left (a chat stream's first event, the role,
        comes before any decoding)."""

        def admit(self, waiting):
            filled = super().admit(waiting)
            admitted.extend(filled)
            return filled

        def step(self, waiting, steps=None):
            stepping.set()
            gate.wait(120)  # (the finally below opens it)
            super().step(waiting, steps)

    monkeypatch.setattr(engine_module, "Slots", Gated)
    server, engine, _ = _start(slots=1)

    def cancelled():
        text = call(server.port, "/metrics")[2]
        line = [
            x
            for x in text.splitlines()
            if x.startswith('specjax_requests_total{outcome="cancelled"}')
        ]
        return float(line[0].split()[-1]) if line else 0.0

    def stream(content):
        """A chat stream whose first event (the role) came."""
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        messages = [{"role": "user", "content": content}]
        body = json.dumps(dict(model=MODEL, messages=messages, stream=True))
        connection.request(
            "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        assert response.status == 200 and response.readline().startswith(b"data: ")
        return connection

    def drop(connection, count):
        connection.sock.close()
        connection.close()
        while cancelled() < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cancelled() == count

    deadline = time.monotonic() + 60
    try:
        running = stream("runs")
        assert stepping.wait(60)  # admitted into the one slot, its first chunk held
        queued = stream("waits")
        drop(queued, 1)  # (while queued)
        drop(running, 2)  # (while running)
        assert engine.in_flight == 2  # neither is gone before the engine's next chunk
        gate.set()
        while engine.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.in_flight == 0 and cancelled() == 2
        assert len(admitted) == 1  # the queued one never took a slot
        ok = _client(server).completions.create(model=MODEL, prompt="after", max_tokens=4)
        assert ok.usage.completion_tokens == 4
    finally:
        gate.set()
        server.drain()
        server.join(30)


def test_a_full_queue_gets_429_with_retry_after(greedy):
    from specjax.cli.decode import build
    from specjax.serve import Engine, EngineRequest, ServeConfig, create_app
    from specjax.serve.server import Server

    _, _, cfg = greedy
    target, tokenizer, drafter, config = build(cfg)
    engine = Engine(target, drafter, config, slots=1, max_queue=1)  # never started: stays full
    engine.submit(EngineRequest((1, 2), 4, "held"), lambda event: None)
    app = create_app(engine, tokenizer, ServeConfig(port=0, served_model_name=MODEL))
    server = Server(app, engine, "127.0.0.1", 0, 0.0).start()
    try:
        status, head, answer = call(server.port, "/v1/completions", {"model": MODEL, "prompt": "x"})
        assert status == 429 and head["Retry-After"] == "1"
        assert answer["error"]["type"] == "rate_limit_error"
    finally:
        server.should_exit = True
        server.join(10)


def test_an_engine_failure_answers_500_and_ends_the_server(greedy, monkeypatch):
    from specjax.serve import engine as engine_module

    class Broken(engine_module.Slots):
        def step(self, waiting, steps=None):
            raise FloatingPointError("the device fell over")

    monkeypatch.setattr(engine_module, "Slots", Broken)
    server, engine, _ = _start()
    status, _, answer = call(server.port, "/v1/completions", {"model": MODEL, "prompt": "x"})
    assert status == 500 and "the device fell over" in answer["error"]["message"]
    server.join(10)
    assert server.exit_code == 1 and engine.failed
