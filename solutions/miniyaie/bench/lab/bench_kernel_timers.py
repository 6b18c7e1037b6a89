"""Timing, not a test: the engine on a workload, with a timer around each call of the two attention kernels.

    LD_PRELOAD=<tcmalloc>:<venv>/lib/libiomp5.so python -m miniyaie.bench.lab.bench_kernel_timers \
        [--workload shared-prefix|random] [--rounds 3] [--compare-grouping | --floor]

Prints, per run, the engine's seconds and each kernel's seconds and calls: how much of a run is
attention, and which kernel. With --compare-grouping, runs alternate between the engine as it is
and decode rows attended one by one (every row a group of its own, round nine's kernel), in one
process, so that a noisy machine slows both alike. With --floor, each run also counts the arithmetic
of attention from the steps' shapes (and the kernels' rate of it), times the whole
attention backend (kernels, writing K/V, its per-step bookkeeping) and the engine outside the
model's forward (scheduling, batching, sampling), then runs the no-attention baseline of `miniyaie bench
offline` on the same steps, and prints ours / floor two ways: against that floor run, and against
the floor estimated inside the engine's own run (its seconds less those two parts), which a machine
whose speed moves between one minute and the next does not disturb. The floor run also takes the
argmax of each step's logits, which the estimate leaves out with the sampler: it is that much lower
(about 0.3 s of the random workload, 0.06 s of the shared prefix), so its ratio errs on our side's cost.
"""
import argparse
import time

import torch

import miniyaie.backends.cpu.paged_attention as paged
from miniyaie.bench.runners import run_engine, run_floor
from miniyaie.bench.workloads import random_workload, shared_prefix_workload
from miniyaie.engine import EngineConfig
from miniyaie.engine.model_runner import ModelRunner
from miniyaie.backends.cpu import kernels as cpu_kernels
from miniyaie.model import load_model, resolve_model_path


def timed(function, totals: dict, name: str):
    def call(*args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        seconds, calls = totals.get(name, (0.0, 0))
        totals[name] = (seconds + time.perf_counter() - start, calls + 1)
        return result
    return call


def count_pairs(new_step, pairs: dict):
    """The backend's once-a-step hook, also counting the step's query-key pairs (a chunk's query i sees
    the keys up to its own position), for the arithmetic of attention."""
    def hook(self, meta):
        for queries, keys in zip(meta.query_lens, meta.seq_lens):
            kind = "decode" if queries == 1 else "chunk"
            pairs[kind] = pairs.get(kind, 0) + queries * (keys - queries) + queries * (queries + 1) // 2
        return new_step(self, meta)
    return hook


def arithmetic_line(model, pairs: dict, totals: dict) -> str:
    """GFLOP of attention (two products of head_dim multiply-adds per pair, head and layer) and the kernels' rate."""
    c = model.config
    flops = {kind: n * 4 * c.head_dim * c.num_heads * c.num_layers for kind, n in pairs.items()}
    kernel_seconds = sum(totals[kind][0] for kind in flops if kind in totals)
    parts = ", ".join(f"{kind} {f / 1e9:.1f}" for kind, f in flops.items())
    return f"attention {sum(flops.values()) / 1e9:.1f} GFLOP ({parts}), kernels at {sum(flops.values()) / 1e9 / kernel_seconds:.0f} GFLOP/s"


def floor_line(model, result, totals: dict) -> str:
    """ours / floor against a floor run, and against the floor inside this run (its seconds less attention
    and the engine outside the forward)."""
    floor = run_floor(model, result, progress=False)
    attention, forward = totals["attention backend"][0], totals["model forward"][0]
    outside = result.seconds - forward
    inside = result.seconds - attention - outside
    return (f"attention backend {attention:.2f} s, engine outside the forward {outside:.2f} s; floor run {floor.seconds:.2f} s "
            f"(ours / floor {floor.seconds / result.seconds:.0%}), floor inside this run {inside:.2f} s "
            f"(ours / floor {inside / result.seconds:.0%})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=["shared-prefix", "random"], default="shared-prefix")
    parser.add_argument("--rounds", type=int, default=3)
    modes_wanted = parser.add_mutually_exclusive_group()
    modes_wanted.add_argument("--compare-grouping", action="store_true")
    modes_wanted.add_argument("--floor", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = load_model(resolve_model_path(None))
    if args.workload == "shared-prefix":
        workload, config = (shared_prefix_workload(4, 8, model.config.vocab_size, 512, 32, 32),
                            EngineConfig(enable_prefix_caching=True, policy="lpm"))
    else:
        workload, config = random_workload(64, model.config.vocab_size), EngineConfig()
    grouping, kernels = paged.group_by_first_block, (cpu_kernels.paged_decode_attention, cpu_kernels.paged_chunk_attention)
    parts = (paged.PagedCpuAttentionBackend.forward, ModelRunner.forward, paged.PagedCpuAttentionBackend._new_step)
    modes = [("grouped", grouping), ("one by one", lambda tables: grouping(tables, 1))]
    for _ in range(args.rounds):
        for label, group in modes if args.compare_grouping else modes[:1]:
            totals: dict = {}
            paged.group_by_first_block = group
            cpu_kernels.paged_decode_attention = timed(kernels[0], totals, "decode")
            cpu_kernels.paged_chunk_attention = timed(kernels[1], totals, "chunk")
            paged.PagedCpuAttentionBackend.forward = timed(parts[0], totals, "attention backend")
            ModelRunner.forward = timed(parts[1], totals, "model forward")
            pairs: dict = {}
            paged.PagedCpuAttentionBackend._new_step = count_pairs(parts[2], pairs)
            try:
                result = run_engine(model, workload, config, "miniyaie", progress=False)
            finally:
                paged.group_by_first_block = grouping
                cpu_kernels.paged_decode_attention, cpu_kernels.paged_chunk_attention = kernels
                paged.PagedCpuAttentionBackend.forward, ModelRunner.forward, paged.PagedCpuAttentionBackend._new_step = parts
            kernel_parts = "; ".join(f"{name} kernel {s:.3f} s in {n} calls ({1e3 * s / n:.2f} ms)"
                                     for name, (s, n) in totals.items() if name in ("decode", "chunk"))
            line = f"{args.workload}, {label}: engine {result.seconds:.2f} s; {kernel_parts}"
            if args.floor:
                line += f"; {arithmetic_line(model, pairs, totals)}; {floor_line(model, result, totals)}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
