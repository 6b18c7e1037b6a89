"""Chapter 6's challenge: latency histograms whose quantiles tell the truth.

An operator reads p50, p90 and p99 off /metrics with Prometheus's
`histogram_quantile`, which knows only the bucket counts and interpolates
inside a bucket. How close that comes to the real quantiles depends on
where the bounds are. A seeded trace of a busy server's request timings
(most answers start fast, some queue, a few wait behind long prefills;
decode gaps are steady with spikes) drives your `RequestTimer`, and the
quantiles are read back from your histograms. Score: the mean relative
error of the nine estimates (p50/p90/p99 of TTFT, inter-token latency and
end-to-end latency), in percent; at most 16 finite bounds per histogram
(each bucket is one more time series to store). Deterministic.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from miniyaie.challenges.base import Challenge

QUANTILES = (0.5, 0.9, 0.99)
MAX_BOUNDS = 16  # finite bucket bounds per histogram: each bucket is one more time series to store
DECADES = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)  # the baseline: one bound per power of ten


@dataclass(frozen=True)
class Request:
    started: float
    token_times: tuple[float, ...]  # when each token reached the client (one completion)


def trace(requests: int = 400, seed: int = 0) -> list[Request]:
    """A busy server's requests: most start fast, some queue, a few wait behind a long prefill; decode gaps
    are steady with spikes when a prefill shares the step."""
    rng = random.Random(seed)
    out, clock = [], 0.0
    for _ in range(requests):
        clock += rng.expovariate(4.0)
        draw = rng.random()
        median = 0.06 if draw < 0.7 else 0.7 if draw < 0.95 else 6.0
        now = clock + median * math.exp(rng.gauss(0, 0.5))
        times = [now]
        for _ in range(rng.randint(8, 300)):
            gap = 0.022 * math.exp(rng.gauss(0, 0.15))
            if rng.random() < 0.04:
                gap += 0.15 * math.exp(rng.gauss(0, 0.6))  # a prefill in the same step
            now += gap
            times.append(now)
        out.append(Request(clock, tuple(times)))
    return out


def observations(requests: list[Request]) -> dict[str, list[float]]:
    """The true values each histogram is told: time to first token, every inter-token gap, end to end."""
    return {
        "ttft": [r.token_times[0] - r.started for r in requests],
        "itl": [b - a for r in requests for a, b in zip(r.token_times, r.token_times[1:])],
        "e2e": [r.token_times[-1] - r.started for r in requests],
    }


def exact_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's histogram_quantile: (upper bound, cumulative count) pairs, the last bound +Inf."""
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower  # the answer lies past the last finite bound: Prometheus returns that bound
            return lower + (bound - lower) * (rank - below) / (count - below) if count > below else bound
        lower, below = bound, count
    return lower


def bucketed(values: list[float], bounds: tuple[float, ...]) -> list[tuple[float, float]]:
    """The cumulative buckets a histogram with `bounds` holds after observing `values`."""
    edges = [*sorted(bounds), math.inf]
    return [(edge, float(sum(v <= edge for v in values))) for edge in edges]


def error(truth: dict[str, list[float]], buckets: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """Relative error of each estimated quantile, and their mean (the score), in percent."""
    errors = {}
    for name, values in truth.items():
        for q in QUANTILES:
            exact = exact_quantile(values, q)
            errors[f"{name} p{round(q * 100)}"] = 100 * abs(histogram_quantile(q, buckets[name]) - exact) / exact
    errors["mean"] = sum(errors.values()) / len(errors)
    return errors


class _Engine:
    """The collector's engine: this challenge scrapes only the request histograms."""

    def get_stats(self) -> dict:
        return {}


class _Result:
    prompt_tokens, completion_tokens = 16, 1


def errors() -> dict[str, float]:
    """Your RequestTimer and histograms, told the trace's token times; quantiles read from the buckets."""
    from miniyaie.api.metrics import ServerMetrics

    requests = trace()
    metrics = ServerMetrics(_Engine())
    for request in requests:
        timer = metrics.timer(request.started)
        for at in request.token_times:
            timer.on_token(0, at)
        timer.on_finish(_Result(), request.token_times[-1])
    buckets = {}
    for name in ("ttft", "itl", "e2e"):
        (family,) = getattr(metrics, name).collect()
        buckets[name] = [(float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket")]
        bounds = len(buckets[name]) - 1
        if bounds > MAX_BOUNDS:
            raise ValueError(f"the {name} histogram has {bounds} finite bounds; the challenge allows {MAX_BOUNDS}")
    return error(observations(requests), buckets)


def run() -> float:
    """The mean relative error (%) of the nine quantiles read from your histograms."""
    return errors()["mean"]


def baseline() -> float:
    truth = observations(trace())
    return error(truth, {name: bucketed(values, DECADES) for name, values in truth.items()})["mean"]


CHALLENGE = Challenge(
    number=6,
    title="latency histograms whose quantiles tell the truth",
    metric="mean error of p50/p90/p99 (TTFT, ITL, end to end) read from the buckets",
    unit="%",
    higher_is_better=False,
    workload=("400 seeded requests of a busy server (8-300 tokens each, 64,000 inter-token gaps) told to your "
              "RequestTimer; quantiles estimated as Prometheus's histogram_quantile does, at most "
              f"{MAX_BOUNDS} finite bounds per histogram"),
    run=run,
    baseline=baseline,
    correctness_tests=["tests/ch06_api/test_metrics_timer.py"],
    note="Deterministic: the same on every machine. Baseline: one bound per power of ten (1 ms to 100 s).",
)
