"""Timing, not a test: SmolLM2's q/k/v and gate/up projections as five oneDNN calls a layer, or merged into two.

    LD_PRELOAD=<tcmalloc>:<venv>/lib/libiomp5.so python -m miniyaie.bench.lab.bench_merged_linears [--threads 2]

30 layers of packed linears (miniyaie.backends.cpu.linear.PackedLinear) with SmolLM2's shapes and random
weights: q 576x576, k and v 576x192, gate and up 576x1536, against qkv 576x960 and
gate_up 576x3072. Best of 7 passes over all layers, each way twice in turn, at 1, 8
64 and 512 rows: at one row (a single client's decode step) each call's fixed cost shows.
"""
import argparse
import time

import torch
from torch import nn

from miniyaie.backends.cpu.linear import PackedLinear

LAYERS, HIDDEN = 30, 576
SEPARATE, MERGED = (576, 192, 192, 1536, 1536), (960, 3072)


def best_ms(layers, x, passes: int = 7) -> float:
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        for layer in layers:
            for linear in layer:
                linear(x)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    torch.set_num_threads(parser.parse_args().threads)
    packed = lambda outputs: [PackedLinear(nn.Linear(HIDDEN, n, bias=False)) for n in outputs]  # noqa: E731
    ways = {"five calls a layer": [packed(SEPARATE) for _ in range(LAYERS)],
            "two calls a layer": [packed(MERGED) for _ in range(LAYERS)]}
    for rows in (1, 8, 64, 512):
        x = torch.randn(rows, HIDDEN)
        for name, layers in list(ways.items()) * 2:
            print(f"{rows:3d} rows, {name}: {best_ms(layers, x):.2f} ms")


if __name__ == "__main__":
    main()
