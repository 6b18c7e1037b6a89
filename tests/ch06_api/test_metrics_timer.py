"""Task 6.1: what an operator watches, without a server: the per-request clock (TTFT, inter-token and
end-to-end latency, tokens), the engine's state read at each scrape, and the count of responses."""

import asyncio

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from miniyaie.api.metrics import ServerMetrics
from miniyaie.api.middleware import RequestCounter
from miniyaie.engine import GenerationOutput
from miniyaie.engine.outputs import CompletionOutput


def histogram(metrics, name):
    """(count, sum) of a histogram in this app's registry."""
    count = metrics.registry.get_sample_value(f"{name}_count")
    total = metrics.registry.get_sample_value(f"{name}_sum")
    return count, pytest.approx(total)


@pytest.mark.task("6.1")
def test_ttft_once_per_request_and_one_gap_per_later_token_of_each_completion():
    metrics = ServerMetrics(engine=None)  # the engine is read only when /metrics is scraped
    timer = metrics.timer(started=10.0)
    timer.on_token(0, now=10.5)  # the request's first token: TTFT 0.5, no gap
    timer.on_token(1, now=10.7)  # completion 1's first token: not a TTFT again, and no gap
    timer.on_token(0, now=10.8)  # gap 0.3 since completion 0's previous token
    timer.on_token(1, now=11.0)  # gap 0.3 since completion 1's previous token
    timer.on_token(0, now=11.4)  # gap 0.6
    assert histogram(metrics, "miniyaie_time_to_first_token_seconds") == (1, 0.5), (
        "(count, sum) of TTFT: one observation per request, from its start to its first token of any completion")
    assert histogram(metrics, "miniyaie_inter_token_latency_seconds") == (3, 1.2), (
        "(count, sum) of ITL: one gap per later token of each completion, measured from that completion's own "
        "previous token; a completion's first token is no gap (0.3 + 0.3 + 0.6 here)")


@pytest.mark.task("6.1")
def test_the_first_token_may_come_from_any_completion_and_any_time_is_a_time():
    metrics = ServerMetrics(engine=None)
    timer = metrics.timer(started=-2.0)
    timer.on_token(1, now=0.0)  # completion 1 speaks first, at time 0.0 (a time, not "no time given")
    timer.on_token(0, now=0.5)
    timer.on_token(1, now=1.5)
    assert histogram(metrics, "miniyaie_time_to_first_token_seconds") == (1, 2.0), (
        "the request's first token came from completion 1 at 0.0: TTFT 2.0, once")
    assert histogram(metrics, "miniyaie_inter_token_latency_seconds") == (1, 1.5), (
        "(count, sum) of ITL: completion 1's gap 0.0 -> 1.5 only; completion 0's first token (0.5) is no gap")


@pytest.mark.task("6.1")
def test_each_request_has_its_own_clock():
    metrics = ServerMetrics(engine=None)
    first, second = metrics.timer(started=0.0), metrics.timer(started=1.0)
    first.on_token(0, now=2.0)
    second.on_token(0, now=2.5)
    second.on_token(0, now=3.0)
    assert histogram(metrics, "miniyaie_time_to_first_token_seconds") == (2, 3.5), (
        "(count, sum) of TTFT: each request's from its own start (2.0 + 1.5)")
    assert histogram(metrics, "miniyaie_inter_token_latency_seconds") == (1, 0.5), (
        "(count, sum) of ITL: one gap, the second request's; a request's first token is no gap")


def result_of(prompt_tokens: int, *completion_lengths: int) -> GenerationOutput:
    outputs = [CompletionOutput(i, "x" * n, list(range(n)), "length") for i, n in enumerate(completion_lengths)]
    return GenerationOutput(f"r{prompt_tokens}", "p", list(range(prompt_tokens)), outputs)


@pytest.mark.task("6.1")
def test_the_end_is_observed_once_per_request_with_its_tokens():
    metrics = ServerMetrics(engine=None)
    first, second = metrics.timer(started=10.0), metrics.timer(started=20.0)
    assert not first.finished
    first.on_finish(result_of(5, 3, 4), now=12.0)  # n = 2: one request, one end
    second.on_finish(result_of(2, 1), now=20.5)
    assert first.finished and second.finished, "on_finish marks the timer finished (Task 6.7 reads it)"
    assert histogram(metrics, "miniyaie_e2e_request_latency_seconds") == (2, 2.5)
    assert metrics.registry.get_sample_value("miniyaie_prompt_tokens_total") == 5 + 2, "prompt tokens once per request"
    assert metrics.registry.get_sample_value("miniyaie_generation_tokens_total") == 3 + 4 + 1, (
        "generated tokens of every completion")


class Engine:
    """An engine whose stats the test sets; it counts how often they are read."""

    def __init__(self):
        self.reads = 0
        self.set(running=0, waiting=0, used=0, held=0, total=64, rate=0.0, preemptions=0, cached=0)

    def set(self, running, waiting, used, held, total, rate, preemptions, cached):
        self.stats = {"requests": {"running": running, "waiting": waiting, "in_flight": running + waiting},
                      "kv_blocks": {"used": used, "held_by_requests": held, "total": total},
                      "prefix_cache_hit_rate": rate, "preemptions": preemptions,
                      "tokens": {"cached_prompt": cached, "prompt": 100, "output": 7}}

    def get_stats(self):
        self.reads += 1
        return self.stats


def scrape(metrics) -> dict[str, tuple[str, float]]:
    """name -> (type, value) of every sample of one scrape, read the way the exposition format reads it."""
    text = generate_latest(metrics.registry).decode()
    return {s.name: (family.type, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.startswith(("miniyaie_requests_", "miniyaie_kv_", "miniyaie_prefix",
                                                          "miniyaie_preemptions", "miniyaie_cached"))}


@pytest.mark.task("6.1")
def test_the_engine_state_is_read_once_per_scrape_and_never_stale():
    engine = Engine()
    metrics = ServerMetrics(engine)
    engine.set(running=3, waiting=2, used=40, held=30, total=64, rate=0.25, preemptions=1, cached=96)
    reads = engine.reads
    assert scrape(metrics) == {
        "miniyaie_requests_running": ("gauge", 3), "miniyaie_requests_waiting": ("gauge", 2),
        "miniyaie_kv_blocks_used": ("gauge", 40), "miniyaie_kv_blocks_held_by_requests": ("gauge", 30),
        "miniyaie_kv_blocks_total": ("gauge", 64), "miniyaie_prefix_cache_hit_rate": ("gauge", 0.25),
        "miniyaie_preemptions_total": ("counter", 1), "miniyaie_cached_prompt_tokens_total": ("counter", 96),
    }, "levels are gauges, lifetime totals counters (named ..._total), each with its value from get_stats()"
    assert engine.reads - reads == 1, f"one scrape read get_stats() {engine.reads - reads} times: read it once"
    engine.set(running=0, waiting=0, used=12, held=0, total=64, rate=0.5, preemptions=4, cached=200)
    later = scrape(metrics)
    assert later["miniyaie_requests_running"] == ("gauge", 0) and later["miniyaie_preemptions_total"] == ("counter", 4), (
        "the numbers must be read at each scrape, not kept from an earlier one")
    from prometheus_client.metrics_core import Metric

    from miniyaie.api.metrics import EngineCollector

    stray = [item for item in EngineCollector(engine).collect() if not isinstance(item, Metric)]
    assert not stray, (f"EngineCollector.collect() yielded {stray!r}: every item must be a metric family "
                       "(is the stub's `yield` still below your code?)")


class Answer:
    """An app that answers `status` (or raises before or after its start), recording nothing."""

    def __init__(self, status: int, fail: str | None = None):
        self.status, self.fail = status, fail

    async def __call__(self, scope, receive, send):
        if self.fail == "before":
            raise RuntimeError("before the start")
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        if self.fail == "after":
            raise RuntimeError("after the start")
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})


def counted(app, path: str):
    """Run RequestCounter around `app` for one request; (messages sent, counts by (endpoint, status), error)."""
    metrics = ServerMetrics(engine=None)
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    error = None
    try:
        asyncio.run(RequestCounter(app, metrics.requests, {"/v1/completions", "/health"})(
            {"type": "http", "path": path, "method": "GET", "headers": []}, receive, send))
    except RuntimeError as exc:
        error = exc
    counts = {(s.labels["endpoint"], s.labels["status"]): s.value
              for family in metrics.requests.collect() for s in family.samples if s.name.endswith("_total")}
    return sent, counts, error


@pytest.mark.task("6.1")
@pytest.mark.parametrize("path, status, endpoint", [("/v1/completions", 200, "/v1/completions"),
                                                    ("/health", 503, "/health"), ("/wp-admin.php", 404, "other"),
                                                    ("/v1/completions/x", 200, "other")])
def test_each_response_is_counted_once_by_known_endpoint_and_status(path, status, endpoint):
    sent, counts, _ = counted(Answer(status), path)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"], (
        "every message the app sends must reach the client, in order")
    assert counts == {(endpoint, str(status)): 1}, (
        f"{path} answered {status}: expected one count labelled ({endpoint!r}, {str(status)!r}), got {counts} "
        "(an unknown path is 'other': a label per path would let any client grow the metrics without end)")


@pytest.mark.task("6.1")
def test_a_failing_app_is_counted_only_if_its_status_went_out_and_its_error_goes_on_up():
    _, counts, error = counted(Answer(200, fail="after"), "/health")
    assert counts == {("/health", "200"): 1} and str(error) == "after the start"
    sent, counts, error = counted(Answer(200, fail="before"), "/health")
    assert counts == {} and sent == [] and str(error) == "before the start", (
        "no status went out, so there is nothing to count (the error guard inside answers such a request)")
