"""Timing, not a test: the batched Sampler vs chapter 0's per-row sample() loop, same logits, same process.

    python -m miniyaie.bench.lab.bench_sampler
"""
import time

import torch

from miniyaie.engine import SamplingParams
from miniyaie.engine.sampler import Sampler, SamplingRow
from miniyaie.model import SamplingParams as Basic, sample


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


if __name__ == "__main__":
    main()
