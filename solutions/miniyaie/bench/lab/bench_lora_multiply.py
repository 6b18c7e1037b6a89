"""Timing, not a test: one step's projections of SmolLM2-135M with rows spread over 8 LoRA adapters, six ways.

    python -m miniyaie.bench.lab.bench_lora_multiply [--threads 2] [--layers 30] [--ranks 8,16] [--rows 8,32,256]
                                                     [--ways base,grouped,...]  (default: all of them)

Random weights with SmolLM2's shapes (q, o 576x576; k, v 576->192; gate, up 576->1536; down 1536->576),
`--layers` layers, 8 adapters in LoRASlots at max rank 8 and 16, rows dealt round-robin to the adapters:
  base          the seven float32 projections alone (F.linear), the floor
  grouped       base + add_lora per projection (rows grouped by adapter: a matmul pair per adapter)
  merged-qkv    as grouped, with q/k/v and gate/up each one shrink (add_merged_lora)
  kernel        as merged-qkv, through the provided C++ kernel: one call per group for all adapters
                (backends/cpu/lora_delta.py, what the model runs on a CPU where it is built)
  row loop      base + the row-by-row definition (add_lora_reference)
  swap weights  for each adapter present: merge its delta into the weights, run its rows, unmerge
                (serving many adapters by merging them in turn)
Best of 6 passes (the ways in turn, three rounds of two), milliseconds for the step's projections of all layers.
"""
import argparse
import time

import torch
import torch.nn.functional as F

from miniyaie.backends.cpu import lora_delta
from miniyaie.lora import LoRAAdapter, LoRASlots, add_lora, add_lora_reference, add_merged_lora, group_rows
from miniyaie.lora.slots import GROUPS
from miniyaie.model.config import ModelConfig

ADAPTERS = 8


def smollm2(layers: int) -> ModelConfig:
    return ModelConfig(family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=layers,
                       num_heads=9, num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5, max_position_embeddings=8192,
                       rope_theta=100000.0)


def best_ms(run, passes: int = 5) -> float:
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--ranks", default="8,16")
    parser.add_argument("--rows", default="8,32,256")
    parser.add_argument("--ways", default="", help="the ways to time, by name (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = smollm2(args.layers)
    torch.manual_seed(0)
    for rank in map(int, args.ranks.split(",")):
        slots = LoRASlots(config, ADAPTERS, rank)
        shapes = slots.shapes
        weights = {m: [torch.randn(o, i) * 0.02 for _ in range(args.layers)] for m, (i, o) in shapes.items()}
        for s in range(ADAPTERS):
            slots.load(s, LoRAAdapter(f"a{s}", rank, 2.0, {(l, m): (torch.randn(rank, i) * 0.02, torch.randn(o, rank) * 0.02)
                                                          for l in range(args.layers) for m, (i, o) in shapes.items()}))
        print(f"rank {rank}: {slots.bytes_per_slot / 2**20:.1f} MiB a slot (float32, {args.layers} layers, 7 projections)")
        for rows in map(int, args.rows.split(",")):
            slot_of_row = torch.arange(rows) % ADAPTERS
            segments = group_rows(slot_of_row)
            xs = {m: torch.randn(rows, i) for m, (i, _) in shapes.items()}

            def base():
                return {m: [F.linear(xs[m], w) for w in ws] for m, ws in weights.items()}

            def grouped():
                for m, ws in weights.items():
                    a, b = slots.a_of(m), slots.b[m]
                    for l, w in enumerate(ws):
                        add_lora(F.linear(xs[m], w), xs[m], segments, a[:, l], b[:, l], slots.scaling)

            def merged():
                for group in GROUPS:
                    for l in range(args.layers):
                        x = xs[group[0]]
                        outs = tuple(F.linear(x, weights[m][l]) for m in group)
                        add_merged_lora(outs, x, segments, slots.a[group][:, l], [slots.b[m][:, l] for m in group],
                                        slots.scaling)

            def kernel():
                for group in GROUPS:
                    for l in range(args.layers):
                        x = xs[group[0]]
                        outs = tuple(F.linear(x, weights[m][l]) for m in group)
                        assert lora_delta.run_kernel(outs, x, segments, slots.a[group][:, l],
                                                     [slots.b[m][:, l] for m in group], slots.scaling)

            def row_loop():
                for m, ws in weights.items():
                    a, b = slots.a_of(m), slots.b[m]
                    for l, w in enumerate(ws):
                        add_lora_reference(F.linear(xs[m], w), xs[m], slot_of_row, a[:, l], b[:, l], slots.scaling)

            def swap():
                for m, ws in weights.items():
                    a, b = slots.a_of(m), slots.b[m]
                    for l, w in enumerate(ws):
                        out = torch.empty(rows, w.shape[0])
                        for s in range(ADAPTERS):
                            delta = slots.scaling[s] * (b[s, l] @ a[s, l])
                            w += delta  # merge
                            mine = slot_of_row == s
                            out[mine] = F.linear(xs[m][mine], w)
                            w -= delta  # unmerge

            ways = (("base", base), ("grouped", grouped), ("merged-qkv", merged), ("row loop", row_loop),
                    ("swap weights", swap))
            if lora_delta.cpu_kernels.load() is not None:
                ways = (*ways[:3], ("kernel", kernel), *ways[3:])
            if args.ways:
                ways = tuple(way for way in ways if way[0] in args.ways.split(","))
            times = {name: float("inf") for name, _ in ways}
            for _ in range(3):  # the ways in turn, three rounds: a busy spell of the machine hits them all alike
                for name, run in ways:
                    times[name] = min(times[name], best_ms(run, passes=2))
            print(f"  {rows:4d} rows: " + ", ".join(f"{k} {v:.1f} ms" for k, v in times.items()))


if __name__ == "__main__":
    main()
