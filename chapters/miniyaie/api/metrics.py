"""/metrics: what an operator watches, in the Prometheus text format.

Two kinds of numbers. The server records per-request timings itself
(time to first token, inter-token latency, end-to-end latency) and counts
requests and tokens. Engine state (KV blocks in use, prefix-cache hit rate,
preemptions, running and waiting requests) is read from
`engine.get_stats()` at scrape time by a collector, so it is never stale.
Each app has its own registry: two servers in one process never mix.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from miniyaie.engine import GenerationOutput, InferenceEngine
from miniyaie.serving.lora_metrics import LoRACollector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


# ANCHOR: engine_collector
class EngineCollector:
    """Engine counters as Prometheus metrics, read when /metrics is scraped."""

    def __init__(self, engine: InferenceEngine):
        self.engine = engine

    def collect(self):
        """The engine's state now, as Prometheus metric families (called by every scrape of /metrics).

        The numbers an operator watches, each from engine.get_stats() (call it `s`):
            miniyaie_requests_running            s["requests"]["running"]
            miniyaie_requests_waiting            s["requests"]["waiting"]
            miniyaie_kv_blocks_used              s["kv_blocks"]["used"] (by requests or the prefix cache)
            miniyaie_kv_blocks_held_by_requests  s["kv_blocks"]["held_by_requests"]
            miniyaie_kv_blocks_total             s["kv_blocks"]["total"]
            miniyaie_prefix_cache_hit_rate       s["prefix_cache_hit_rate"] (over the engine's life)
            miniyaie_preemptions                 s["preemptions"] (requests preempted since the start)
            miniyaie_cached_prompt_tokens        s["tokens"]["cached_prompt"] (since the start)
        Each is the family Prometheus means for it: a gauge for a number that may go down, a
        counter for one that can only grow (its sample is named ..._total), each with a one-line
        help text. All the numbers of one scrape describe the same moment, and that moment is
        the scrape.
        """
        # Idea: a collector keeps nothing; what a number can do over time decides its family.
        # Stuck? `miniyaie hint 6.1` prints hints, one level at a time.
        # TODO(Task 6.1): What an operator watches. Replace these lines with your code.
        raise NotImplementedError('Chapter 6, Task 1: What an operator watches — see book/src/ch06_api.md')
        yield  # never runs: it keeps this function a generator, as its callers expect

# ANCHOR_END: engine_collector


class SpeculativeCollector:
    """Speculative decoding's counters (chapter 9) as Prometheus counters, read at every scrape."""

    def __init__(self, engine: InferenceEngine):
        self.engine = engine

    def collect(self):
        s = self.engine.get_stats()["speculative"]
        yield CounterMetricFamily("miniyaie_spec_draft_tokens", "draft tokens the model scored", value=s["draft_tokens"])
        yield CounterMetricFamily("miniyaie_spec_accepted_tokens", "draft tokens the model kept",
                                  value=s["accepted_draft_tokens"])
        yield CounterMetricFamily("miniyaie_spec_verifications", "request-steps that verified drafts",
                                  value=s["verified_steps"])


class ServerMetrics:
    def __init__(self, engine: InferenceEngine):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("miniyaie_http_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("miniyaie_prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("miniyaie_generation_tokens", "tokens generated", registry=r)
        self.aborted = Counter("miniyaie_aborted_streams", "streams that ended early (client gone or error)", registry=r)
        self.ttft = Histogram("miniyaie_time_to_first_token_seconds", "request arrival to its first token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("miniyaie_inter_token_latency_seconds", "time between two tokens of one completion",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("miniyaie_e2e_request_latency_seconds", "request arrival to its last token",
                             buckets=LATENCY_BUCKETS, registry=r)
        r.register(EngineCollector(engine))
        if getattr(engine, "speculative_method", None) is not None:  # chapter 9's counters, when it runs
            r.register(SpeculativeCollector(engine))
        if getattr(engine, "adapter_names", None) is not None and engine.adapter_names():  # chapter 11's, when served
            r.register(LoRACollector(engine))

    def timer(self, started: float | None = None) -> RequestTimer:
        return RequestTimer(self, started)


class RequestTimer:
    """The clock of one request: started on arrival, told about every delta and the end."""

    def __init__(self, metrics: ServerMetrics, started: float | None = None):
        self.metrics = metrics
        self.started = time.perf_counter() if started is None else started
        self.first_token_at: float | None = None
        self.last_token_at: dict[int, float] = {}  # completion index -> when its last token arrived
        self.finished = False

    # ANCHOR: on_token
    def on_token(self, index: int, now: float | None = None) -> None:
        """Completion `index` received a new token at `now` (perf_counter seconds; None: the clock now).

        Two latencies come out of the stream of tokens. Time to first token (`metrics.ttft`) is
        the request's: from `started` to the first token the client gets, observed once. The
        inter-token latency (`metrics.itl`) is each completion's: one observation per gap
        between two consecutive tokens of that completion. Tokens of a request's completions
        (n > 1) arrive interleaved, in any order.
        """
        # Idea: whose is each latency: the request's or a completion's?
        # Stuck? `miniyaie hint 6.1` prints hints, one level at a time.
        # TODO(Task 6.1): What an operator watches. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 1: What an operator watches — see book/src/ch06_api.md')
    # ANCHOR_END: on_token

    # ANCHOR: on_finish
    def on_finish(self, result: GenerationOutput, now: float | None = None) -> None:
        """The request ended with `result` at `now` (None: the clock now); the timer is then `finished`.

        Observes the end-to-end latency (`metrics.e2e`, now - started) and counts the request's
        prompt tokens (`metrics.prompt_tokens`, result.prompt_tokens) and generated tokens
        (`metrics.generation_tokens`, result.completion_tokens, every completion's): all once
        per request, however many completions it had.
        """
        # Idea: the end belongs to the request, like its first token.
        # Stuck? `miniyaie hint 6.1` prints hints, one level at a time.
        # TODO(Task 6.1): What an operator watches. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 1: What an operator watches — see book/src/ch06_api.md')
    # ANCHOR_END: on_finish
