"""Timing, not a test: the batched Sampler vs chapter 0's per-row sample() loop, same logits, same process;
then one step of the sampled benchmark's rows (temperature 0.7, top_p 0.9, top_k 50) on their top-k
columns (engine/top_columns.py) against the whole-row path, beside a greedy step.

    python -m miniyaie.bench.lab.bench_sampler
"""
import time

import torch

from miniyaie.engine import SamplingParams
from miniyaie.engine.sampler import Sampler, SamplingRow
from miniyaie.engine import top_columns
from miniyaie.model import SamplingParams as Basic, sample


def best_of(functions, rounds=3, repeat=5):
    """Each function's best mean over `rounds` alternated rounds of `repeat` calls, in seconds."""
    for f in functions.values():
        f()
    times = {name: [] for name in functions}
    for _ in range(rounds):
        for name, f in functions.items():
            t = time.perf_counter()
            for _ in range(repeat):
                f()
            times[name].append((time.perf_counter() - t) / repeat)
    return {name: min(t) for name, t in times.items()}


def top_columns_against_whole_rows(logits):
    B = len(logits)
    sampler = Sampler()
    sampled = [SamplingRow(SamplingParams(temperature=0.7, top_p=0.9, top_k=50), [1], [2]) for _ in range(B)]
    greedy = [SamplingRow(SamplingParams(), [1], [2]) for _ in range(B)]
    forced_off = lambda *a: None  # noqa: E731: every batch takes the whole-row path
    on = top_columns.filter_on_columns

    def whole_rows():
        top_columns.filter_on_columns = forced_off
        try:
            sampler(logits, sampled)
        finally:
            top_columns.filter_on_columns = on

    res = best_of({"greedy": lambda: sampler(logits, greedy), "columns": lambda: sampler(logits, sampled),
                   "whole rows": whole_rows})
    print(f"B={B} V={logits.shape[1]} temperature=0.7 top_p=0.9 top_k=50: top-k columns {res['columns']*1e3:.1f} ms/step, "
          f"whole rows {res['whole rows']*1e3:.1f} ms/step ({res['whole rows']/res['columns']:.1f}x); "
          f"greedy {res['greedy']*1e3:.1f} ms/step")


def main():
    torch.set_num_threads(1)
    B, V = 32, 49152
    logits = torch.randn(B, V) * 3
    rows = [SamplingRow(SamplingParams(temperature=0.8, top_p=0.9, seed=i), [1], [2], generator=torch.Generator().manual_seed(i))
            for i in range(B)]
    gens = [torch.Generator().manual_seed(i) for i in range(B)]
    basic = Basic(temperature=0.8, top_p=0.9)
    sampler = Sampler()

    def batched():
        sampler(logits, rows)

    def per_row():
        for i in range(B):
            sample(logits[i:i + 1], basic, gens[i])

    for f in (batched, per_row):
        f()
    res = {}
    for _ in range(3):
        for f in (batched, per_row):
            t = time.perf_counter()
            for _ in range(5):
                f()
            res.setdefault(f.__name__, []).append((time.perf_counter() - t) / 5)
    b, p = min(res["batched"]), min(res["per_row"])
    print(f"B={B} V={V} temperature=0.8 top_p=0.9 seeded: batched {b*1e3:.1f} ms/step, per-row loop {p*1e3:.1f} ms/step, ratio {p/b:.2f}x")
    top_columns_against_whole_rows(logits)


if __name__ == "__main__":
    main()
