"""`miniyaie bench serve` sends new prompts at every concurrency and reports the server's cached prompt tokens.

A server with a prefix cache answers a prompt it has seen faster; the client
must not hand it the same prompts level after level and call the difference
concurrency. Two servers are measured: a recording stand-in on loopback
(it keeps every request body and says whatever usage the test asks for) and
our real server, whose own counters must agree with what the client reports.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from server_helpers import wait_until_idle

from miniyaie.bench.serve import prompts_per_level
from miniyaie.cli import main

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks


class RecordingServer:
    """An OpenAI-style streaming chat endpoint on 127.0.0.1 that records the bodies it receives.

    Each answer is two content chunks, then (when asked for) a usage chunk whose
    cached_tokens is the prompt's word count, or no prompt_tokens_details at all.
    """

    def __init__(self, report_cached: bool = True):
        self.bodies: list[dict] = []
        self.report_cached = report_cached
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(200, "application/json", json.dumps({"data": [{"id": "fake"}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                words = len(body["messages"][0]["content"].split())
                chunks = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in ("a", "b")]
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage = {"prompt_tokens": 100 + words, "completion_tokens": 2, "total_tokens": 102 + words}
                    if server.report_cached:
                        usage["prompt_tokens_details"] = {"cached_tokens": words}
                    chunks.append({"choices": [], "usage": usage})
                stream = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self._send(200, "text/event-stream", stream.encode())

            def _send(self, status, kind, payload):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def bench(url, tmp_path, *extra, levels="1,2,2", requests=3):
    out = tmp_path / "bench.json"
    status = main(["bench", "serve", "--url", url, "--concurrency", levels, "--num-requests", str(requests), "--max-tokens", "2",
                   "--prompt-words", "6", "--json", str(out), *extra])
    return status, json.loads(out.read_text())["results"]


@pytest.mark.ungraded
def test_no_prompt_is_sent_at_two_concurrencies_and_a_rerun_sends_the_same_ones(tmp_path):
    with RecordingServer() as server:
        assert bench(server.url, tmp_path)[0] == 0
        first = [b["messages"][0]["content"] for b in server.bodies]
        server.bodies.clear()
        assert bench(server.url, tmp_path)[0] == 0
        again = [b["messages"][0]["content"] for b in server.bodies]
    assert len(first) == 9 and len(set(first)) == 9  # three levels of three requests, all different
    assert sorted(first) == sorted(again)  # same command, same prompts: every server gets the same ones


@pytest.mark.ungraded
@settings(max_examples=30, deadline=None)
@given(levels=st.lists(st.integers(1, 16), min_size=1, max_size=5), count=st.integers(1, 12), seed=st.integers(0, 99))
@example(levels=[4, 4], count=16, seed=0)  # the same concurrency twice still gets new prompts
def test_prompts_per_level_are_fresh_and_reproducible(levels, count, seed):
    drawn = prompts_per_level(levels, count, 48, seed)
    assert [len(level) for level in drawn] == [count] * len(levels)
    for i, level in enumerate(drawn):
        for other in drawn[i + 1:]:
            assert not set(level) & set(other)
    assert drawn == prompts_per_level(levels, count, 48, seed)


@pytest.mark.ungraded
def test_cached_tokens_are_what_the_server_said(tmp_path, capsys):
    with RecordingServer() as server:
        status, results = bench(server.url, tmp_path, levels="1,2")
        bodies = list(server.bodies)
    assert status == 0
    assert all(b["stream_options"] == {"include_usage": True} for b in bodies)
    per_level = [bodies[:3], bodies[3:]]
    for result, sent in zip(results, per_level):
        words = [len(b["messages"][0]["content"].split()) for b in sent]
        assert result["cached_tokens"] == sum(words)
        assert result["prompt_tokens"] == sum(100 + w for w in words)
        assert result["cached_share"] == pytest.approx(sum(words) / sum(100 + w for w in words))
    assert "cached" in capsys.readouterr().out


@pytest.mark.ungraded
def test_a_server_that_does_not_say_gets_no_cached_figure(tmp_path, capsys):
    with RecordingServer(report_cached=False) as server:
        status, results = bench(server.url, tmp_path, levels="2")
    assert status == 0
    assert results[0]["cached_tokens"] is None and results[0]["cached_share"] is None
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.split()[:1] == ["2"])
    assert row.split()[4] == "-"  # the cached column


@pytest.mark.ungraded
def test_no_stream_usage_sends_no_stream_options(tmp_path):
    with RecordingServer() as server:
        status, results = bench(server.url, tmp_path, "--no-stream-usage", levels="1", requests=2)
        bodies = list(server.bodies)
    assert status == 0 and bodies and not any("stream_options" in b for b in bodies)
    assert results[0]["cached_share"] is None
    assert results[0]["completion_tokens"] == 2 * 2  # counted from the content chunks instead


@pytest.mark.ungraded
def test_sampled_sends_the_sampling_settings_and_greedy_sends_temperature_zero(tmp_path):
    with RecordingServer() as server:
        assert bench(server.url, tmp_path, levels="1", requests=2)[0] == 0
        assert bench(server.url, tmp_path, "--sampling", "sampled", levels="1", requests=2)[0] == 0
        bodies = list(server.bodies)
    greedy, sampled = bodies[:2], bodies[2:]
    assert all(b["temperature"] == 0 and "top_p" not in b and "top_k" not in b for b in greedy)
    assert all((b["temperature"], b["top_p"], b["top_k"]) == (0.7, 0.9, 50) for b in sampled), \
        "--sampling sampled must ask every request for temperature 0.7, top_p 0.9, top_k 50"


def test_our_server_reports_the_cached_tokens_its_counters_saw(served, tmp_path):
    engine, server = served
    wait_until_idle(engine)
    before = engine.get_stats()["tokens"]
    status, results = bench(server.url, tmp_path, levels="1,2", requests=4)
    after = wait_until_idle(engine)["tokens"]
    assert status == 0
    assert sum(r["prompt_tokens"] for r in results) == after["prompt"] - before["prompt"]
    assert sum(r["cached_tokens"] for r in results) == after["cached_prompt"] - before["cached_prompt"]
    for r in results:  # fresh prompts share only the chat template and the instruction, never a whole prompt
        assert 0 <= r["cached_tokens"] < r["prompt_tokens"] - r["requests"]
