"""Timing, not a test: the engine on a workload, with a timer around each call of the two attention kernels.

    LD_PRELOAD=<tcmalloc>:<venv>/lib/libiomp5.so python tests/ch05_engine/bench_kernel_timers.py \
        [--workload shared-prefix|random] [--rounds 3] [--compare-grouping]

Prints, per run, the engine's seconds and each kernel's seconds and calls: how much of a run is
attention, and which kernel. With --compare-grouping, runs alternate between the engine as it is
and decode rows attended one by one (every row a group of its own, round nine's kernel), in one
process, so that a noisy machine slows both alike.
"""
import argparse
import time

import torch

import miniyaie.model.paged_cpu_attention as paged
from miniyaie.bench.runners import run_engine
from miniyaie.bench.workloads import random_workload, shared_prefix_workload
from miniyaie.engine import EngineConfig
from miniyaie.model import cpu_kernels, load_model, resolve_model_path


def timed(function, totals: dict, name: str):
    def call(*args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        seconds, calls = totals.get(name, (0.0, 0))
        totals[name] = (seconds + time.perf_counter() - start, calls + 1)
        return result
    return call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=["shared-prefix", "random"], default="shared-prefix")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare-grouping", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = load_model(resolve_model_path(None))
    if args.workload == "shared-prefix":
        workload, config = (shared_prefix_workload(4, 8, model.config.vocab_size, 512, 32, 32),
                            EngineConfig(enable_prefix_caching=True, policy="lpm"))
    else:
        workload, config = random_workload(64, model.config.vocab_size), EngineConfig()
    grouping, kernels = paged.group_by_first_block, (cpu_kernels.paged_decode_attention, cpu_kernels.paged_chunk_attention)
    modes = [("grouped", grouping), ("one by one", lambda tables: grouping(tables, 1))]
    for _ in range(args.rounds):
        for label, group in modes if args.compare_grouping else modes[:1]:
            totals: dict = {}
            paged.group_by_first_block = group
            cpu_kernels.paged_decode_attention = timed(kernels[0], totals, "decode")
            cpu_kernels.paged_chunk_attention = timed(kernels[1], totals, "chunk")
            try:
                result = run_engine(model, workload, config, "miniyaie", progress=False)
            finally:
                paged.group_by_first_block = grouping
                cpu_kernels.paged_decode_attention, cpu_kernels.paged_chunk_attention = kernels
            parts = "; ".join(f"{name} kernel {s:.3f} s in {n} calls ({1e3 * s / n:.2f} ms)" for name, (s, n) in totals.items())
            print(f"{args.workload}, {label}: engine {result.seconds:.2f} s; {parts}", flush=True)


if __name__ == "__main__":
    main()
