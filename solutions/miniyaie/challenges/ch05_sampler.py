"""Chapter 5's challenge: a step's sampling at 64 rows, as fast as you can make it.

One batch of logits over SmolLM2's 49,152-token vocabulary, 64 rows asking
for what real requests ask: greedy; temperature with top-k; top-p with
repetition and frequency penalties over a 320-token history; min-p, seeded,
with logprobs and a min_tokens ban. Your `Sampler` runs it; score: the
median seconds of one call. A timing: it varies by machine and with the
machine's load, so read the ratio to the reference, measured in the same
run. The baseline is the reference's sampler called once per row.
"""

from __future__ import annotations

import statistics
import time

import torch

from miniyaie.challenges.base import Challenge

ROWS, VOCAB, PROMPT, OUTPUT = 64, 49152, 256, 64  # SmolLM2's vocabulary; a prompt and an answer so far


def batch(seed: int = 0):
    """(logits [64, 49152], 64 SamplingRows): greedy, top-k, top-p with penalties, min-p seeded with logprobs."""
    from miniyaie.engine.sampler import SamplingRow
    from miniyaie.engine.sampling_params import SamplingParams

    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(ROWS, VOCAB, generator=generator) * 3
    kinds = [
        SamplingParams(),  # greedy
        SamplingParams(temperature=0.8, top_k=50),
        SamplingParams(temperature=0.7, top_p=0.9, repetition_penalty=1.1, frequency_penalty=0.2),
        SamplingParams(temperature=1.0, min_p=0.05, seed=7, logprobs=5, min_tokens=80),
    ]
    rows = []
    for i in range(ROWS):
        params = kinds[i % len(kinds)]
        ids = torch.randint(0, VOCAB, (PROMPT + OUTPUT,), generator=generator).tolist()
        rows.append(SamplingRow(params, ids[:PROMPT], ids[PROMPT:], stop_token_ids=(2,),
                                generator=torch.Generator().manual_seed(i) if params.seed is not None else None))
    return logits, rows


def time_calls(sample, logits, rows, repeats: int = 9, warm_up: int = 2) -> float:
    """Median seconds of `sample(logits, rows)` after `warm_up` calls."""
    for _ in range(warm_up):
        sample(logits, rows)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        sample(logits, rows)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def one_row_at_a_time(sampler):
    """The baseline: the same sampler called once per row, as a loop over requests would."""
    return lambda logits, rows: [sampler(logits[i : i + 1], rows[i : i + 1])[0] for i in range(len(rows))]


def run() -> float:
    """Your Sampler on the batch (the selected tree): median milliseconds of one call."""
    from miniyaie.engine.sampler import Sampler

    logits, rows = batch()
    return 1e3 * time_calls(Sampler(), logits, rows)


def baseline() -> float:
    from miniyaie.engine.sampler import Sampler

    logits, rows = batch()
    return 1e3 * time_calls(one_row_at_a_time(Sampler()), logits, rows, repeats=2, warm_up=1)


CHALLENGE = Challenge(
    number=5,
    title="a step's sampling at 64 rows, as fast as you can make it",
    metric="median time of one sampler call",
    unit="ms",
    higher_is_better=False,
    workload=(f"{ROWS} rows of seeded logits over a {VOCAB:,}-token vocabulary: greedy; top-k; top-p with "
              f"repetition and frequency penalties over {PROMPT + OUTPUT} tokens; min-p seeded with 5 logprobs "
              "and a min_tokens ban (one quarter each)"),
    run=run,
    baseline=baseline,
    correctness_tests=["tests/ch05_engine/test_sampler.py", "tests/ch05_engine/test_batched_sampler.py",
                       "tests/ch05_engine/test_sampler_contract.py", "tests/ch05_engine/test_top_columns.py"],
    extra={"ratio": True},
    note=("A timing: it varies by machine and with the machine's load; compare yours with the reference, "
          "measured in the same run. Baseline: the reference's sampler called once per row."),
)
