"""Timing, not a test: the engine on three workloads at several step token budgets, in one process.

    LD_PRELOAD=<tcmalloc>:<venv>/lib/libiomp5.so python -m miniyaie.bench.lab.bench_token_budget 512,1024,2048

Each workload is warmed once, then every budget runs in turn, twice; the seconds of each run print.
"""
import argparse

from miniyaie.bench.runners import run_engine
from miniyaie.bench.workloads import random_workload, shared_prefix_workload
from miniyaie.engine import EngineConfig
from miniyaie.model import load_model, resolve_model_path


def main():
    parser = argparse.ArgumentParser(description="the engine on three workloads at several step token budgets")
    parser.add_argument("budgets", nargs="?", default="512,1024,2048", help="max_num_batched_tokens values, comma-separated")
    budgets = [int(b) for b in parser.parse_args().budgets.split(",")]
    model = load_model(resolve_model_path(None))
    vocab = model.config.vocab_size
    workloads = {
        "random, 64 requests": (random_workload(64, vocab), {}),
        "48 prompts of 96 to 288 tokens, 64 out": (random_workload(48, vocab, (96, 288), (64, 64)), {}),
        "shared prefix": (shared_prefix_workload(4, 8, vocab, 512, 32, 32), dict(enable_prefix_caching=True, policy="lpm")),
    }
    for name, (workload, extra) in workloads.items():
        run_engine(model, workload, EngineConfig(**extra), "warm-up", progress=False)
        seconds = {budget: [] for budget in budgets}
        for _ in range(2):
            for budget in budgets:
                config = EngineConfig(max_num_batched_tokens=budget, **extra)
                seconds[budget].append(run_engine(model, workload, config, str(budget), progress=False).seconds)
        print(name, {budget: [round(s, 2) for s in runs] for budget, runs in seconds.items()}, flush=True)


if __name__ == "__main__":
    main()
