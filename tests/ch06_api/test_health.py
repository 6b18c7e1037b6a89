"""/health tells the truth: a request that fails alone leaves the server healthy; a dead engine loop is a 503."""

import threading

import httpx
import pytest
from server_helpers import MODEL, start_server, wait_until_idle

from miniyaie.engine.stop_strings import StopStringFilter

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks
VICTIM_STOP = "\x00no text has this"  # marks the one request whose stop-string filter raises
MESSAGES = [{"role": "user", "content": "hello engine"}]


def chat(url, **fields):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 8, "temperature": 0, "ignore_eos": True, **fields}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


def test_a_request_that_fails_alone_gets_a_500_and_its_neighbour_its_answer(served, monkeypatch):
    engine, server = served
    expected = chat(server.url).json()["choices"][0]["message"]["content"]
    push = StopStringFilter.push

    def failing_push(self, delta):
        if VICTIM_STOP in self.stops:
            raise RuntimeError("injected: the stop-string filter failed")
        return push(self, delta)

    monkeypatch.setattr(StopStringFilter, "push", failing_push)
    failed_before = engine.get_stats()["requests"]["failed"]
    replies = {}
    neighbour = threading.Thread(target=lambda: replies.setdefault("neighbour", chat(server.url)))
    neighbour.start()
    replies["victim"] = chat(server.url, stop=[VICTIM_STOP])
    neighbour.join(timeout=120)
    assert replies["victim"].status_code == 500, replies["victim"].text
    error = replies["victim"].json()["error"]
    assert error["type"] == "server_error" and "injected" in error["message"]
    assert replies["neighbour"].status_code == 200
    assert replies["neighbour"].json()["choices"][0]["message"]["content"] == expected
    stats = wait_until_idle(engine)
    assert stats["requests"]["failed"] == failed_before + 1 and stats["loop_alive"]
    health = httpx.get(f"{server.url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert chat(server.url).json()["choices"][0]["message"]["content"] == expected


def test_health_is_503_once_the_engine_loop_has_died(tiny_loaded, monkeypatch):
    engine, server = start_server(tiny_loaded, num_blocks=64)
    try:
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200

        def broken(*args, **kwargs):
            raise RuntimeError("injected: device lost")

        # a step fails, then giving its blocks back fails too: the engine cannot trust its state and stops
        monkeypatch.setattr(engine.llm.runner, "run", broken)
        monkeypatch.setattr(engine.llm, "abort", broken)
        in_flight = chat(server.url)
        assert in_flight.status_code == 503, in_flight.text  # an answer, not a request left waiting forever
        health = httpx.get(f"{server.url}/health", timeout=30)
        assert health.status_code == 503
        error = health.json()["error"]
        assert error["type"] == "service_unavailable" and "device lost" in error["message"]
        stats = httpx.get(f"{server.url}/stats", timeout=30).json()
        assert stats["loop_alive"] is False and "device lost" in stats["loop_error"]
        assert chat(server.url).status_code == 503  # refused at once
    finally:
        server.__exit__(None, None, None)
        engine.close()
