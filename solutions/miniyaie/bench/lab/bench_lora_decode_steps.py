"""Timing, not a test: decode steps of a batch of LoRA requests, four ways taken in turn step by step.

    python -m miniyaie.bench.lab.bench_lora_decode_steps [--num-requests 32] [--adapters 8] [--rank 16] [--tokens 80]

The bundled SmolLM2-135M-Instruct in its GGUF file's own blocks (the engine's default on a CPU) with
`--adapters` random peft adapters of rank `--rank` on every projection (bench_multi_lora's), one engine,
`--num-requests` requests of 32 to 64 prompt tokens, request i on adapter i mod the adapters. Once every
request decodes, consecutive decode steps are timed in turn as
  lora/stack    the adapters' deltas added inside the CPU decode stack (backends/cpu/decode_stack_lora.py);
  base/stack    the same step in the stack with no row's adapter (the base model's work);
  lora/layers   the adapters' step layer by layer (the stack off, as before it took adapters);
  base/layers   the base model's step layer by layer.
Taken in turn, a busy spell of a shared machine hits every way alike; the median and the best of each are
printed, and lora/base within the stack and within the layers. Steps of the base ways compute the tokens
without the deltas: this times the work, it does not serve the requests.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from miniyaie.backends.cpu.runtime import relaunch
from miniyaie.bench.lab.bench_multi_lora import load_average, make_adapters, run
from miniyaie.bench.workloads import random_workload
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.weights.engine_plugin import load_quantized

WAYS = ("lora/stack", "base/stack", "lora/layers", "base/layers")


def main() -> None:
    parser = argparse.ArgumentParser(description="LoRA decode steps in the CPU decode stack against the layers")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=80, help="output tokens of every request (decode steps timed)")
    args = parser.parse_args()
    model = load_quantized(None, "gguf", torch.float32, "cpu").model
    with tempfile.TemporaryDirectory(prefix="miniyaie-lora-steps-") as folder:
        paths = make_adapters(Path(folder), args.adapters, args.rank)
        names = list(paths)
        engine = LLMEngine(model, EngineConfig(lora_adapters=paths, max_loras=args.adapters, max_lora_rank=args.rank))
        runner, stack, batch = engine.runner, engine.runner.decode_graphs, engine.lora.batch
        if stack is None or engine.lora.decode_stack_refused:
            sys.exit(f"no decode stack with adapters here: {engine.lora.decode_stack_refused}")
        workload = random_workload(args.num_requests, model.config.vocab_size, (32, 64), (args.tokens, args.tokens))
        run(engine, workload.prompts[: args.adapters], [4] * args.adapters, names)  # every adapter in its slot
        times, ways, forward = defaultdict(list), itertools.cycle(WAYS), runner.forward

        def timed_forward(input_ids, positions, meta, logit_rows):
            if len(meta.query_lens) != args.num_requests or any(n != 1 for n in meta.query_lens):
                runner.decode_graphs = stack  # prefill and the steps of fewer rows: as the engine runs them
                return forward(input_ids, positions, meta, logit_rows)
            way = next(ways)
            runner.decode_graphs = stack if way.endswith("stack") else None
            segments = batch.segments
            if way.startswith("base"):
                batch.segments = None  # no row's adapter: the base model's step
            start = time.perf_counter()
            try:
                return forward(input_ids, positions, meta, logit_rows)
            finally:
                times[way].append(time.perf_counter() - start)
                batch.segments = segments

        load_before = load_average()
        runner.forward = timed_forward
        run(engine, workload.prompts, workload.output_lens, [names[i % len(names)] for i in range(args.num_requests)])
        runner.forward = forward
    print(f"{args.num_requests} decode rows a step, {args.adapters} adapters of rank {args.rank} on every projection, "
          f"GGUF blocks; load before {load_before}, after {load_average()}; torch {torch.get_num_threads()} threads")
    print(f"{'way':12} {'steps':>5} {'median ms':>10} {'best ms':>8}")
    for way in WAYS:
        print(f"{way:12} {len(times[way]):5} {1000 * statistics.median(times[way]):10.1f} {1000 * min(times[way]):8.1f}")
    for where in ("stack", "layers"):
        lora, base = times[f"lora/{where}"], times[f"base/{where}"]
        print(f"{where}: the adapters' rate / the base's, median {statistics.median(base) / statistics.median(lora):.2f}, "
              f"best {min(base) / min(lora):.2f}")


if __name__ == "__main__":
    relaunch(sys.argv[1:], module="miniyaie.bench.lab.bench_lora_decode_steps")
    main()
