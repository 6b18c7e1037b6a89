"""Chapter 1's challenge: lower p99 time to first token on a bursty trace without losing throughput.

Your lever: a `make_scheduler(memory)` in your `miniyaie/scheduler/challenge.py`, returning a
Scheduler (your own, with the settings, policy or subclass you choose). The plain chapter 1
scheduler (FCFS, budget 512, no bound on a long prefill's share of a step) is the default and
the baseline. The reference's entry is its own `make_scheduler`, in solutions/miniyaie/scheduler/challenge.py
(the reference column runs it). Scored in simulated time from a step-cost model (simulate.py): deterministic. Forty
seeded traces, their 2,885 chat turns pooled: the p99 is then a turn near the top, not the single worst, and a design
tuned to a few traces' accidents (when a document lands in a burst) does not carry the score.
"""

from __future__ import annotations

from miniyaie.challenges.base import Challenge, learner_design
from miniyaie.challenges.simulate import SimResult, bursty_trace, percentile, simulate

CAPACITY_TOKENS = 16_384
CHAT_PROMPT = 80  # prompts up to this long are the interactive chat turns whose TTFT is scored
THROUGHPUT_FLOOR = 0.95  # of the baseline's output tokens per simulated second


def plain_scheduler(memory):
    from miniyaie.scheduler import Scheduler, SchedulerConfig

    return Scheduler(SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=64), memory)


TRACE_SEEDS = tuple(range(40))  # forty traces: on five, designs ranked by their accidents (20 unseen ones reordered them)


def _simulate(make_scheduler, seed: int) -> SimResult:
    from miniyaie.scheduler import Request, TokenCountingMemory

    return simulate(make_scheduler, TokenCountingMemory(CAPACITY_TOKENS), bursty_trace(seed=seed), Request)


def _chat_ttfts_and_throughput(make_scheduler) -> tuple[list[float], float]:
    """Every chat turn's TTFT over the traces, and the output tokens per simulated second over all of them."""
    ttfts, tokens, milliseconds = [], 0, 0.0
    for seed in TRACE_SEEDS:
        result = _simulate(make_scheduler, seed)
        ttfts += [ttft for ttft, request in zip(result.ttft_ms, bursty_trace(seed=seed)) if len(request.prompt) <= CHAT_PROMPT]
        tokens, milliseconds = tokens + result.output_tokens, milliseconds + result.makespan_ms
    return ttfts, 1000 * tokens / milliseconds


_last_ratio: list[float] = []  # the throughput / plain of the last design scored in this process, for explain()
_plain_throughput: list[float] = []  # the plain scheduler's, measured once per process


def _score(make_scheduler) -> float:
    """The chat turns' p99 TTFT over the traces; infinite when throughput falls below the floor (latency bought with throughput)."""
    ttfts, throughput = _chat_ttfts_and_throughput(make_scheduler)
    if not _plain_throughput:
        _plain_throughput.append(_chat_ttfts_and_throughput(plain_scheduler)[1])
    ratio = throughput / _plain_throughput[0]
    _last_ratio[:] = [ratio]
    return percentile(ttfts, 99) if ratio >= THROUGHPUT_FLOOR else float("inf")


def _explain(score: float) -> str:
    """The line under the table: your design's throughput next to the floor, and why a score is inf."""
    if not _last_ratio:
        return ""
    ratio = _last_ratio[0]
    if score == float("inf"):
        return (f"yours is inf: its throughput is {ratio:.1%} of the plain scheduler's, below the "
                f"{THROUGHPUT_FLOOR:.0%} floor (latency bought with throughput does not count)")
    return f"your throughput: {ratio:.1%} of the plain scheduler's (the floor is {THROUGHPUT_FLOOR:.0%})"


CHALLENGE = Challenge(
    number=1,
    title="a scheduler that lowers p99 time to first token on a bursty trace",
    metric="chat turns' p99 TTFT",
    unit="simulated ms",
    higher_is_better=False,
    workload=("forty traces (seeds 0-39) of 8 bursts of 6-12 chat turns (20-80 prompt tokens) with 1-2 documents of "
              "1500-3000 tokens among them; memory of 16,384 tokens; a step costs 20 ms + 0.5 ms a request + 0.25 ms a token; "
              "a design whose throughput falls below 95% of the plain scheduler's scores inf"),
    run=lambda: _score(learner_design(1, "make_scheduler", plain_scheduler)),
    baseline=lambda: _score(plain_scheduler),
    explain=_explain,
    correctness_tests=["tests/ch01_scheduler"],
)
