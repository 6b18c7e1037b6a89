"""Task 6.1: the per-request clock behind the TTFT and inter-token-latency histograms, without a server."""

import pytest

from miniyaie.api.metrics import ServerMetrics


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
    assert histogram(metrics, "miniyaie_time_to_first_token_seconds") == (1, 0.5)
    assert histogram(metrics, "miniyaie_inter_token_latency_seconds") == (3, 1.2)


@pytest.mark.task("6.1")
def test_each_request_has_its_own_clock():
    metrics = ServerMetrics(engine=None)
    first, second = metrics.timer(started=0.0), metrics.timer(started=1.0)
    first.on_token(0, now=2.0)
    second.on_token(0, now=2.5)
    second.on_token(0, now=3.0)
    assert histogram(metrics, "miniyaie_time_to_first_token_seconds") == (2, 3.5)  # 2.0 + 1.5
    assert histogram(metrics, "miniyaie_inter_token_latency_seconds") == (1, 0.5)
