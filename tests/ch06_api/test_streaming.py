"""SSE on the wire, disconnects, and /metrics parsed with prometheus_client's own parser."""

import json
import time

import httpx
import pytest
from server_helpers import MODEL, wait_until_idle
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from miniyaie.api.sse import sse_event

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@pytest.mark.task("6.7")
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
@example({"content": "two\nlines\n\ndata: [DONE]\n\n"})
@example({"content": "caf\u00e9 \U0001f600"})
def test_an_event_is_one_data_line_and_a_blank_line(payload):
    event = sse_event(payload)
    assert event.startswith("data: ") and event.endswith("\n\n"), (
        f"an event is 'data: ', the payload, and a blank line ('\\n\\n' at the end), got {event!r}")
    line = event[len("data: ") : -2]
    assert "\n" not in line and "\r" not in line, f"the payload broke the data line into several: {line!r}"
    assert json.loads(line) == payload, "the data line must be the payload's JSON"


@pytest.mark.task("6.7")
def test_text_travels_as_itself_and_a_string_payload_is_sent_as_is():
    assert "caf\u00e9" in sse_event({"content": "caf\u00e9"}), "non-ASCII text was escaped (\\u00e9) instead of sent as UTF-8"
    assert sse_event("[DONE]") == "data: [DONE]\n\n", "a string payload is sent as it is, not JSON-quoted"
    assert sse_event({"a": [1, 2], "b": "x y"}) == 'data: {"a":[1,2],"b":"x y"}\n\n', (
        f"a dict travels as compact JSON (no space after ',' and ':'), got {sse_event({'a': [1, 2], 'b': 'x y'})!r}"
    )


@pytest.mark.task("6.7")  # events on the wire need the stream of Task 6.7
def test_the_wire_carries_sse_events_ending_with_done(served):
    _, server = served
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        raw = reply.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-1])
    assert [c["object"] for c in chunks] == ["chat.completion.chunk"] * len(chunks)
    assert sum(1 for c in chunks for ch in c["choices"] if ch["delta"].get("content")) >= 1


def metric_samples(url):
    text = httpx.get(f"{url}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.task("6.7")  # through the server: needs Tasks 6.1-6.7
def test_metrics_count_requests_tokens_and_latencies(served):
    engine, server = served
    wait_until_idle(engine)
    before = metric_samples(server.url)
    requests, tokens = 3, 6
    for i in range(requests):
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"count {i}"}], "max_tokens": tokens,
                "stream": i % 2 == 0, "ignore_eos": True}
        assert httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).status_code == 200
    httpx.post(f"{server.url}/v1/chat/completions", json={"model": "nope", "messages": []})
    after = metric_samples(server.url)

    def grew(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("miniyaie_http_requests_total", endpoint="/v1/chat/completions", status="200") == requests
    assert grew("miniyaie_http_requests_total", endpoint="/v1/chat/completions", status="400") == 1
    assert grew("miniyaie_generation_tokens_total") == requests * tokens
    assert grew("miniyaie_time_to_first_token_seconds_count") == requests  # one first token per request
    assert grew("miniyaie_inter_token_latency_seconds_count") == requests * (tokens - 1)  # gaps between tokens
    assert grew("miniyaie_e2e_request_latency_seconds_count") == requests
    assert grew("miniyaie_time_to_first_token_seconds_sum") > 0 and grew("miniyaie_inter_token_latency_seconds_sum") > 0
    assert grew("miniyaie_time_to_first_token_seconds_sum") <= grew("miniyaie_e2e_request_latency_seconds_sum")
    stats = engine.get_stats()
    assert sample(after, "miniyaie_kv_blocks_total") == stats["kv_blocks"]["total"]
    assert sample(after, "miniyaie_kv_blocks_held_by_requests") == 0
    assert 0 <= sample(after, "miniyaie_prefix_cache_hit_rate") <= 1
    for name in ("miniyaie_kv_blocks_used", "miniyaie_preemptions_total", "miniyaie_requests_running",
                 "miniyaie_requests_waiting", "miniyaie_prompt_tokens_total"):
        assert any(key[0] == name for key in after), name


@pytest.mark.task("6.7")
def test_a_client_that_disconnects_mid_stream_aborts_its_request(served):
    engine, server = served
    wait_until_idle(engine)
    before_stats, before = engine.get_stats(), metric_samples(server.url)
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 100, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as reply:
        lines = reply.iter_lines()
        received = [line for line, _ in zip(lines, range(6)) if line.startswith("data: ")]
    assert received  # the stream had started; closing the response hangs up mid-stream
    stats = wait_until_idle(engine)
    generated = stats["tokens"]["output"] - before_stats["tokens"]["output"]
    assert generated < 100, "the request ran to its end after its client left"
    assert stats["requests"]["finished"] >= before_stats["requests"]["finished"]
    after = metric_samples(server.url)
    assert sample(after, "miniyaie_aborted_streams_total") - sample(before, "miniyaie_aborted_streams_total") == 1
    engine.llm.memory.check_integrity()
    time.sleep(0.05)
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


@pytest.mark.task("6.7")
def test_closing_the_event_stream_aborts_the_engine_request(served):
    """However the server stops reading (cancel or close), the engine request must end and free its blocks."""
    import asyncio

    from miniyaie.api.metrics import ServerMetrics
    from miniyaie.openai_format import CompletionChunker
    from miniyaie.api.streaming import event_stream

    engine, _ = served
    wait_until_idle(engine)
    before = engine.get_stats()["tokens"]["output"]

    async def read_two_events_then_close():
        items = engine.stream_async("Once upon a time", max_tokens=100, ignore_eos=True)
        events = event_stream(items, CompletionChunker("cmpl-test", MODEL, False), ServerMetrics(engine).timer())
        received = [await events.__anext__(), await events.__anext__()]
        await events.aclose()  # what an ASGI server does with a response whose client left
        while engine.get_stats()["requests"]["in_flight"]:  # still inside the loop: `items` is alive and unclosed
            await asyncio.sleep(0.01)
        return received, engine.get_stats()

    received, stats = asyncio.run(asyncio.wait_for(read_two_events_then_close(), timeout=60))
    assert all(event.startswith("data: {") for event in received)
    assert stats["tokens"]["output"] - before < 100, "the request ran to its end after its stream was closed"
    assert stats["kv_blocks"]["held_by_requests"] == 0
    engine.llm.memory.check_integrity()
