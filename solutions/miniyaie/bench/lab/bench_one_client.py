"""Timing, not a test: one request alone in the engine (one client), milliseconds per decoded token.

    LD_PRELOAD=<tcmalloc>:<venv>/lib/libiomp5.so python -m miniyaie.bench.lab.bench_one_client
    PYTHONPATH=<another checkout>/solutions python solutions/miniyaie/bench/lab/bench_one_client.py   # its code instead

A 192-token prompt, then 32 tokens more: each step is one row, where the fixed cost of every
call in the model shows. Best of six generations, after a warm-up; the prompt is in the prefix
cache after the first, so the prefill (timed alone first) is subtracted. Alternate two checkouts'
runs and compare: the machine's noise is larger than one run's spread.
"""
import argparse
import time

import torch

import miniyaie
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import SamplingParams, load_model, resolve_model_path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = LLMEngine(load_model(resolve_model_path(None)), EngineConfig())
    best = seconds_per_token(engine, args.tokens, repeats=6)
    print(f"{miniyaie.__file__}: {best * 1e3:.1f} ms per decoded token (best of 6)")


def seconds_per_token(engine: LLMEngine, tokens: int = 32, repeats: int = 6) -> float:
    """Best of `repeats`: seconds per decoded token of one request (a 192-token prompt, its prefill subtracted)."""
    prompt = [(17 * i) % 30000 + 100 for i in range(192)]
    run = lambda n: engine.generate([prompt], SamplingParams(max_tokens=n, ignore_eos=True))  # noqa: E731
    run(4)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(1)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        run(tokens + 1)
        best = min(best, (time.perf_counter() - start - prefill) / tokens)
    return best


if __name__ == "__main__":
    main()
